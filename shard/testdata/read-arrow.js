#!/usr/bin/env node
// A second Arrow implementation reads ferry shards: npm apache-arrow.
//
//   NODE_PATH=$FERRY_NODE_MODULES node read-arrow.js SHARD.arrow...
//
// Prints one JSON line per file: its SHA-256, schema metadata, rows,
// batches and a checksum of every column (h = h*31 + v mod 2^32 over the
// values in row order; int64 samples as two 32-bit halves, low first).
'use strict'
const fs = require('fs')
const crypto = require('crypto')
const { tableFromIPC } = require('apache-arrow')

function hashInt32(h, arr) {
  for (let i = 0; i < arr.length; i++) h = (Math.imul(h, 31) + arr[i]) >>> 0
  return h
}

for (const file of process.argv.slice(2)) {
  const bytes = fs.readFileSync(file)
  const table = tableFromIPC(bytes)
  const out = {
    file,
    sha256: crypto.createHash('sha256').update(bytes).digest('hex'),
    rows: table.numRows,
    batches: table.batches.length,
    metadata: Object.fromEntries(table.schema.metadata),
    columns: table.schema.fields.map((f) => `${f.name}: ${f.type}`),
    hash: {},
  }
  const h = {}
  for (const name of ['input_ids', 'labels', 'position_ids']) {
    const col = table.getChild(name)
    if (!col) continue
    let v = 0
    for (const d of col.data) {
      const child = d.children[0]
      const L = d.type.listSize
      v = hashInt32(v, child.values.subarray((d.offset) * L, (d.offset + d.length) * L))
    }
    h[name] = v
  }
  let len = 0
  for (const d of table.getChild('length').data) len = hashInt32(len, d.values.subarray(d.offset, d.offset + d.length))
  h.length = len
  let offs = 0, sample = 0, start = 0, slen = 0, nseg = 0
  for (const d of table.getChild('segments').data) {
    const vo = d.valueOffsets
    const st = d.children[0]
    const [cs, cst, cl] = st.children
    for (let r = d.offset; r < d.offset + d.length; r++) {
      const n = vo[r + 1] - vo[r]
      offs = (Math.imul(offs, 31) + n) >>> 0
      for (let k = vo[r]; k < vo[r + 1]; k++) {
        const big = cs.values[st.offset + k]
        const lo = Number(BigInt.asUintN(32, big)), hi = Number(BigInt.asUintN(32, big >> 32n))
        sample = (Math.imul(sample, 31) + lo) >>> 0
        sample = (Math.imul(sample, 31) + hi) >>> 0
        start = (Math.imul(start, 31) + cst.values[st.offset + k]) >>> 0
        slen = (Math.imul(slen, 31) + cl.values[st.offset + k]) >>> 0
        nseg++
      }
    }
  }
  Object.assign(h, { seg_counts: offs, seg_sample: sample, seg_start: start, seg_length: slen, segments: nseg })
  out.hash = h
  process.stdout.write(JSON.stringify(out) + '\n')
}
