// server.js — an S3-compatible server for kvtier's tests and bench.
//
// Starts @20minutes/s3rver (which checks SigV4 signatures) on 127.0.0.1 with
// an ephemeral port, behind the fault proxy of faultproxy.js, and prints one
// line "PORT <proxy port> <s3rver port>" once both listen.  Exits when stdin
// closes (the parent died or closed the pipe) or on SIGTERM.
//
//   node server.js DIR BUCKET [BUCKET...]
//
// Credentials: access key "kvtier-test", secret "kvtier-test-secret".
// Fault control (unsigned, answered by the proxy, never forwarded): see
// faultproxy.js (GET /__fault?mode=...&count=N, GET /__stats).
'use strict'
const { createFaultProxy } = require('./faultproxy')
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

s3.run((err, addr) => {
  if (err) { console.error(err); process.exit(1) }
  const p = createFaultProxy(addr.port)
  p.listen(0, '127.0.0.1', () => {
    process.stdout.write(`PORT ${p.address().port} ${addr.port}\n`)
  })
})
process.stdin.on('end', () => process.exit(0))
process.stdin.resume()
process.on('SIGTERM', () => process.exit(0))
