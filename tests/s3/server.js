// server.js — an S3-compatible server for kvtier's tests and bench.
//
// Starts @20minutes/s3rver (which checks SigV4 signatures) on 127.0.0.1 with
// an ephemeral port, behind a small fault-injecting HTTP proxy, and prints
// one line "PORT <proxy port> <s3rver port>" once both listen.  Exits when
// stdin closes (the parent died or closed the pipe) or on SIGTERM.
//
//   node server.js DIR BUCKET [BUCKET...]
//
// Credentials: access key "kvtier-test", secret "kvtier-test-secret".
// Fault control (unsigned, answered by the proxy, never forwarded):
//   GET /__fault?mode=500|503|hang|truncate|slow&count=N   next N requests
//   GET /__fault?mode=none                                  clear
//   GET /__stats                                            "requests N"
'use strict'
const http = require('node:http')
const S3rver = require('@20minutes/s3rver')
const AWSAccount = require('@20minutes/s3rver/lib/models/account')

const [dir, ...buckets] = process.argv.slice(2)
if (!dir || buckets.length === 0) {
  console.error('usage: node server.js DIR BUCKET...')
  process.exit(2)
}
// Signatures are checked against this pair; the default S3RVER pair is revoked.
AWSAccount.DUMMY_ACCOUNT.revokeAccessKey('S3RVER')
AWSAccount.DUMMY_ACCOUNT.createKeyPair('kvtier-test', 'kvtier-test-secret')

const s3 = new S3rver({
  address: '127.0.0.1',
  port: 0,
  silent: true,
  directory: dir,
  allowMismatchedSignatures: false,
  configureBuckets: buckets.map((name) => ({ name })),
})

let fault = { mode: 'none', count: 0 }
let requests = 0
const agent = new http.Agent({ keepAlive: true, maxSockets: 256 })

function proxy(backendPort) {
  return http.createServer((req, res) => {
    const u = new URL(req.url, 'http://x')
    if (u.pathname === '/__fault') {
      fault = { mode: u.searchParams.get('mode') || 'none', count: Number(u.searchParams.get('count') || 1) }
      res.end('ok\n')
      return
    }
    if (u.pathname === '/__stats') {
      res.end(`requests ${requests}\n`)
      return
    }
    requests++
    let mode = 'none'
    if (fault.mode !== 'none' && fault.count > 0) {
      mode = fault.mode
      if (--fault.count === 0) fault.mode = 'none'
    }
    if (mode === '500') {
      req.resume()
      res.writeHead(500, { 'content-type': 'application/xml' })
      res.end('<?xml version="1.0"?><Error><Code>InternalError</Code><Message>injected</Message></Error>')
      return
    }
    if (mode === '503') {
      req.resume()
      res.writeHead(503, { 'content-type': 'application/xml' })
      res.end('<?xml version="1.0"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>')
      return
    }
    if (mode === 'hang') {
      req.resume() // read the request, never answer
      return
    }
    const up = http.request(
      { host: '127.0.0.1', port: backendPort, method: req.method, path: req.url, headers: req.headers, agent },
      (ur) => {
        if (mode === 'truncate' && ur.statusCode < 300 && Number(ur.headers['content-length']) > 1) {
          const want = Math.floor(Number(ur.headers['content-length']) / 2)
          res.writeHead(ur.statusCode, ur.headers)
          let sent = 0
          ur.on('data', (d) => {
            if (sent >= want) return
            const part = d.subarray(0, want - sent)
            sent += part.length
            res.write(part)
            if (sent >= want) { ur.destroy(); res.socket.destroy() }
          })
          return
        }
        if (mode === 'slow') {
          setTimeout(() => { res.writeHead(ur.statusCode, ur.headers); ur.pipe(res) }, 5000)
          return
        }
        res.writeHead(ur.statusCode, ur.headers)
        ur.pipe(res)
      }
    )
    up.on('error', () => { res.destroy() })
    req.pipe(up)
  })
}

s3.run((err, addr) => {
  if (err) { console.error(err); process.exit(1) }
  const p = proxy(addr.port)
  p.keepAliveTimeout = 60000
  p.listen(0, '127.0.0.1', () => {
    process.stdout.write(`PORT ${p.address().port} ${addr.port}\n`)
  })
})
process.stdin.on('end', () => process.exit(0))
process.stdin.resume()
process.on('SIGTERM', () => process.exit(0))
