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
// Conditional writes.  s3rver ignores `If-None-Match: *` on PUT (last writer
// wins), so the proxy emulates AWS S3's conditional write (first writer wins,
// 412 PreconditionFailed for the others) on every request that passes
// through it.  It cannot ask s3rver first (a HEAD would need the client's
// signature), so it keeps, per Host and raw object path, what it has seen
// exist:
//   - learnt present: a 2xx to a PUT of the object (not an UploadPart), to a
//     CompleteMultipartUpload, or to a GET/HEAD of it;
//   - learnt absent: a 2xx to a DELETE of the object (not an
//     AbortMultipartUpload), a 404 to a GET/HEAD; a DeleteObjects batch
//     forgets the whole bucket (forgetting only ever falls back to s3rver's
//     own last-writer-wins).
// A PUT or CompleteMultipartUpload carrying `If-None-Match: *` whose object is
// known present, or has another conditional write in flight, is answered 412
// PreconditionFailed with an S3 error body and never forwarded; otherwise it
// is forwarded and claims the name until its answer (a failed write releases
// it).  Objects written to s3rver behind the proxy's back are not known, so
// such a put still wins last, as it did before.  /__stats counts the 412s as
// "precondition_failed".
//
// Standalone:  node faultproxy.js UPSTREAM_PORT   prints "PORT <port>".
'use strict'
const http = require('node:http')

const LIST_MODES = new Set(['looplist', 'freshlist', 'notoken', 'htmllist'])

function isList(req) {
  // ListObjectsV2 is a GET of the bucket with list-type=2 in the query.
  return req.method === 'GET' && /[?&]list-type=2(&|$)/.test(req.url)
}

function s3Error(res, status, code, message, extra = '') {
  res.writeHead(status, { 'content-type': 'application/xml' })
  res.end(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${message}</Message>${extra}</Error>`)
}

// What a request does to the existence of one object, for the emulation of
// conditional writes (see the top of this file): 'put' (a PUT of an object
// or a CompleteMultipartUpload), 'read' (GET/HEAD of an object), 'delete'
// (DELETE of an object), 'batchdelete' (DeleteObjects), or '' (anything
// else: UploadPart, listings, bucket and multipart bookkeeping).
function objectOp(req) {
  const q = req.url.indexOf('?')
  const query = q < 0 ? '' : req.url.slice(q + 1)
  const has = (name) => new RegExp(`(^|&)${name}(=|&|$)`).test(query)
  if (req.method === 'PUT') return has('partNumber') || has('uploadId') || has('acl') || has('tagging') ? '' : 'put'
  if (req.method === 'POST') return has('uploadId') ? 'put' : has('delete') ? 'batchdelete' : ''
  if (req.method === 'GET' || req.method === 'HEAD') return query === '' || has('versionId') || has('partNumber') ? 'read' : ''
  if (req.method === 'DELETE') return has('uploadId') ? '' : 'delete'
  return ''
}

// The name the emulation keeps an object under: Host (virtual-hosted
// buckets) and the raw path, as the client signed them.
function objectName(req) {
  const q = req.url.indexOf('?')
  return `${req.headers.host || ''} ${q < 0 ? req.url : req.url.slice(0, q)}`
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
  const stats = { requests: 0, faulted: 0, lists: 0, precondition_failed: 0 }
  const present = new Set() // object names known to exist
  const claimed = new Set() // names with a conditional write in flight
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

  // Learn from an upstream answer what exists (conditional-write emulation).
  function learn(req, op, status) {
    const name = objectName(req)
    const ok = status >= 200 && status < 300
    if (op === 'put' && ok) present.add(name)
    else if (op === 'read' && ok) present.add(name)
    else if (op === 'read' && status === 404) present.delete(name)
    else if (op === 'delete' && ok) present.delete(name)
    else if (op === 'batchdelete' && ok) {
      // "host /bucket?delete" (path style) or "host /?delete" (virtual host).
      const bucket = name.replace(/\/+$/, '') + '/'
      for (const n of present) if (n.startsWith(bucket)) present.delete(n)
    }
  }

  function forward(req, res, mode, f, done = () => {}) {
    const op = objectOp(req)
    const up = http.request({
      host: upstreamHost,
      port: upstreamPort,
      method: req.method,
      path: req.url,          // the raw request target, as signed
      headers: req.rawHeaders, // raw pairs: Host and every signed header as sent
      setHost: false,
      agent,
    }, (ur) => {
      learn(req, op, ur.statusCode)
      done(ur.statusCode)
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
    up.on('error', () => { done(0); res.destroy() })
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
        break
    }
    if (req.headers['if-none-match'] && req.headers['if-none-match'].trim() === '*' &&
        objectOp(req) === 'put') {
      // AWS S3's conditional write, emulated (see the top of this file).
      const name = objectName(req)
      if (present.has(name) || claimed.has(name)) {
        stats.precondition_failed++
        req.resume()
        return s3Error(res, 412, 'PreconditionFailed',
          'At least one of the pre-conditions you specified did not hold',
          '<Condition>If-None-Match</Condition>')
      }
      claimed.add(name)
      let released = false
      const release = () => { if (!released) { released = true; claimed.delete(name) } }
      res.on('close', release)
      return forward(req, res, mode, f, release)
    }
    return forward(req, res, mode, f)
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
