#!/usr/bin/env node
// The anchor of the dataprep benchmark: HF tokenizers (Rust, Node binding)
// batch-encoding the same formatted Alpaca texts as dataprep, the way the
// seed workloads tokenize (truncation to max_length, padding="max_length").
// Tokenization alone: no shuffling, no rank files, nothing written.
//
//   RAYON_NUM_THREADS=N NODE_PATH=$FERRY_NODE_MODULES node hf-batch.js \
//       --tokenizer DIR_OR_tokenizer.json --eos TOKEN [--pad TOKEN] [--max-length 1024] [--no-padding] ALPACA.json
//
// --no-padding: truncation only (the stricter anchor: padding to max_length
// makes HF build 1024-entry encodings, which costs more than the encoding).
//
// Prints one JSON line: {"records", "bytes", "tokens", "read_s", "encode_s", "total_s", "threads"}.
// encode_s covers formatting + encodeBatch; read_s the JSON parse.
'use strict'
const fs = require('fs')
const path = require('path')
const { Tokenizer } = require('tokenizers')

function args(argv) {
  const o = { tokenizer: null, eos: null, pad: null, maxLength: 1024, input: null, padding: true }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === '--tokenizer') o.tokenizer = argv[++i]
    else if (a === '--eos') o.eos = argv[++i]
    else if (a === '--pad') o.pad = argv[++i]
    else if (a === '--max-length') o.maxLength = Number(argv[++i])
    else if (a === '--no-padding') o.padding = false
    else if (a.startsWith('--')) throw new Error(`unknown flag ${a}`)
    else o.input = a
  }
  if (!o.tokenizer || o.eos === null || !o.input) throw new Error('need --tokenizer, --eos and an input file')
  if (o.pad === null) o.pad = o.eos
  return o
}

async function main() {
  const o = args(process.argv.slice(2))
  const t0 = process.hrtime.bigint()
  let tf = o.tokenizer
  if (fs.statSync(tf).isDirectory()) tf = path.join(tf, 'tokenizer.json')
  const tok = Tokenizer.fromFile(tf)
  tok.setTruncation(o.maxLength)
  if (o.padding) tok.setPadding({ maxLength: o.maxLength, padId: tok.tokenToId(o.pad), padToken: o.pad })
  const t1 = process.hrtime.bigint()
  const recs = JSON.parse(fs.readFileSync(o.input, 'utf8'))
  const t2 = process.hrtime.bigint()
  const texts = recs.map((r) => {
    let text = `### Instruction:\n${r.instruction}\n\n`
    if (r.input) text += `### Input:\n${r.input}\n\n`
    return text + `### Response:\n${r.output}${o.eos}`
  })
  const encs = await tok.encodeBatch(texts)
  const t3 = process.hrtime.bigint()
  let tokens = 0
  let bytes = 0
  for (const e of encs) tokens += e.getAttentionMask().reduce((a, b) => a + b, 0)
  for (const t of texts) bytes += Buffer.byteLength(t)
  const s = (a, b) => Number(b - a) / 1e9
  process.stdout.write(JSON.stringify({
    records: recs.length, bytes, tokens, load_s: s(t0, t1), read_s: s(t1, t2), encode_s: s(t2, t3), total_s: s(t0, t3),
    threads: Number(process.env.RAYON_NUM_THREADS || 0), padding: o.padding,
  }) + '\n')
}
main().catch((e) => { console.error(e); process.exit(1) })
