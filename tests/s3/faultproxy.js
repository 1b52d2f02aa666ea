// faultproxy.js — a hostile S3 endpoint for kvtier's tests: an HTTP proxy
// placed in front of a real S3 server (s3rver, which checks SigV4) that
// forwards requests unchanged or misbehaves on purpose.
//
// Forwarding keeps the request exactly as the client signed it: the same
// method, the raw request target (path and query string byte for byte), the
// raw header list (names, order, duplicates, and the Host header the client
// signed; Node adds none of its own) and the body as it arrives.  That is
// what lets s3rver verify SigV4 signatures through the proxy.  Answers come
// back with the upstream's raw status and headers.
//
// Faults are chosen per run (environment) or per request (control endpoint):
//
//   FAULT_MODE=M FAULT_COUNT=N FAULT_METHOD=GET FAULT_MATCH=substr
//   GET /__fault?mode=M&count=N[&method=GET][&match=substr][&chunk=B][&every=MS][&token=T]
//   GET /__fault?mode=none          clear
//   GET /__stats                    {"requests":N,"faulted":N,"lists":N,"mode":"..."}
//
// The next N requests that match (method, and `match` as a substring of the
// request target) get mode M; the rest pass through.  Control requests are
// unsigned, answered by the proxy and never forwarded ('_' cannot start a
// bucket name, so they cannot collide with S3 requests).
//
//   500       HTTP 500 InternalError (an S3 error body)
//   503       HTTP 503 SlowDown
//   reset     close the connection without answering
//   hang      read the request, never answer, keep the connection open
//   truncate  forward; answer with the upstream's Content-Length but send
//             only half the body, then close (applies to 2xx answers)
//   slow      forward; send the headers at once and the body `chunk` bytes
//             (default 512) every `every` ms (default 50)
//   looplist  ListObjectsV2 only: an empty page with IsTruncated=true and
//             the same NextContinuationToken (`token`, default
//             "kvt-loop-token") every time
//   freshlist ListObjectsV2 only: IsTruncated=true and a new token each page
//   notoken   ListObjectsV2 only: IsTruncated=true and no token
//   htmllist  ListObjectsV2 only: 200 with an HTML page (a captive portal,
//             a misrouted load balancer)
//
// Standalone:  node faultproxy.js UPSTREAM_PORT   prints "PORT <port>".
'use strict'
const http = require('node:http')

const LIST_MODES = new Set(['looplist', 'freshlist', 'notoken', 'htmllist'])

function isList(req) {
  // ListObjectsV2 is a GET of the bucket with list-type=2 in the query.
  return req.method === 'GET' && /[?&]list-type=2(&|$)/.test(req.url)
}

function s3Error(res, status, code, message) {
  res.writeHead(status, { 'content-type': 'application/xml' })
  res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${message}</Message></Error>`)
}

function listPage(res, truncated, token) {
  const body = '<?xml version="1.0" encoding="UTF-8"?>' +
    '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">' +
    '<Name>kvt</Name><Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys>' +
    `<IsTruncated>${truncated ? 'true' : 'false'}</IsTruncated>` +
    (token ? `<NextContinuationToken>${token}</NextContinuationToken>` : '') +
    '</ListBucketResult>'
  res.writeHead(200, { 'content-type': 'application/xml', 'content-length': Buffer.byteLength(body) })
  res.end(body)
}

function parseFault(get) {
  const n = Number(get('count') || 1)
  return {
    mode: get('mode') || 'none',
    count: Number.isFinite(n) ? n : 1,
    method: get('method') || '',
    match: get('match') || '',
    chunk: Math.max(1, Number(get('chunk') || 512)),
    every: Math.max(1, Number(get('every') || 50)),
    token: get('token') || 'kvt-loop-token',
  }
}

function createFaultProxy(upstreamPort, upstreamHost = '127.0.0.1') {
  const env = (k) => process.env['FAULT_' + k.toUpperCase()]
  let fault = parseFault(env)
  const stats = { requests: 0, faulted: 0, lists: 0 }
  let fresh = 0
  const agent = new http.Agent({ keepAlive: true, maxSockets: 256 })

  // The mode for this request, counting it down; 'none' when it passes.
  function pick(req) {
    const f = fault
    if (f.mode === 'none' || f.count <= 0) return 'none'
    if (LIST_MODES.has(f.mode) && !isList(req)) return 'none'
    if (f.method && f.method !== req.method) return 'none'
    if (f.match && !req.url.includes(f.match)) return 'none'
    if (--f.count <= 0) fault = { ...f, mode: 'none' }
    stats.faulted++
    return f.mode
  }

  function forward(req, res, mode, f) {
    const up = http.request({
      host: upstreamHost,
      port: upstreamPort,
      method: req.method,
      path: req.url,          // the raw request target, as signed
      headers: req.rawHeaders, // raw pairs: Host and every signed header as sent
      setHost: false,
      agent,
    }, (ur) => {
      const len = Number(ur.headers['content-length'])
      if (mode === 'truncate' && ur.statusCode < 300 && len > 1) {
        // Promise the whole body, deliver half, then end the connection.
        const want = Math.floor(len / 2)
        let sent = 0
        res.writeHead(ur.statusCode, ur.rawHeaders)
        ur.on('data', (d) => {
          if (sent >= want) return
          const part = d.subarray(0, want - sent)
          sent += part.length
          if (sent < want) { res.write(part); return }
          ur.destroy()
          res.write(part, () => res.socket && res.socket.end())
        })
        return
      }
      if (mode === 'slow') {
        // Headers at once, then the body a trickle at a time.
        const bufs = []
        res.writeHead(ur.statusCode, ur.rawHeaders)
        ur.on('data', (d) => bufs.push(d))
        ur.on('end', () => {
          const body = Buffer.concat(bufs)
          let off = 0
          const tick = () => {
            if (res.destroyed) return
            const part = body.subarray(off, off + f.chunk)
            off += part.length
            if (off >= body.length) { res.end(part); return }
            res.write(part)
            setTimeout(tick, f.every)
          }
          tick()
        })
        return
      }
      res.writeHead(ur.statusCode, ur.rawHeaders)
      ur.pipe(res)
    })
    up.on('error', () => res.destroy())
    res.on('close', () => { if (!res.writableFinished) up.destroy() })
    req.pipe(up)
  }

  const server = http.createServer((req, res) => {
    const u = new URL(req.url, 'http://x')
    if (u.pathname === '/__fault') {
      fault = parseFault((k) => u.searchParams.get(k))
      res.end('ok\n')
      return
    }
    if (u.pathname === '/__stats') {
      res.end(JSON.stringify({ ...stats, mode: fault.mode, left: fault.count }) + '\n')
      return
    }
    stats.requests++
    if (isList(req)) stats.lists++
    const f = fault
    const mode = pick(req)
    switch (mode) {
      case '500':
        req.resume()
        return s3Error(res, 500, 'InternalError', 'injected by faultproxy')
      case '503':
        req.resume()
        return s3Error(res, 503, 'SlowDown', 'Please reduce your request rate.')
      case 'reset':
        req.resume()
        req.socket.destroy()
        return
      case 'hang':
        req.resume() // read it all, answer nothing
        return
      case 'looplist':
        req.resume()
        return listPage(res, true, f.token)
      case 'freshlist':
        req.resume()
        return listPage(res, true, `kvt-fresh-${++fresh}`)
      case 'notoken':
        req.resume()
        return listPage(res, true, '')
      case 'htmllist':
        req.resume()
        res.writeHead(200, { 'content-type': 'text/html' })
        return res.end('<html><body>Welcome! Please log in.</body></html>')
      default:
        return forward(req, res, mode, f)
    }
  })
  server.keepAliveTimeout = 60000
  return server
}

module.exports = { createFaultProxy }

if (require.main === module) {
  const port = Number(process.argv[2])
  if (!port) {
    console.error('usage: node faultproxy.js UPSTREAM_PORT')
    process.exit(2)
  }
  const p = createFaultProxy(port)
  p.listen(0, '127.0.0.1', () => process.stdout.write(`PORT ${p.address().port}\n`))
  process.on('SIGTERM', () => process.exit(0))
}
