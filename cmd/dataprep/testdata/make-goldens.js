#!/usr/bin/env node
// Seed-parity goldens for dataprep: what HF tokenizers gives for the seeds'
// build_dataset(), i.e.
//   text = "### Instruction:\n{instruction}\n\n" + ("### Input:\n{input}\n\n" if input) +
//          "### Response:\n{output}" + eos_token
//   tokenizer(text, truncation=True, max_length=1024, padding="max_length")
// through the Node binding of HF tokenizers (Tokenizer.fromFile,
// setTruncation, setPadding).
//
//   NODE_PATH=$HOME/.cache/ferry/npm/node_modules node make-goldens.js \
//       TOKENIZER.json EOS PAD DATA.json > OUT.jsonl
//   (then zstd -19 OUT.jsonl)
//
// DATA.json is an Alpaca JSON array (decompress the .zst fixtures first).
// Output: one line per record, {"ids": [...]} = input_ids[:sum(attention_mask)];
// the script checks that the rest is pad_id with attention_mask 0, so the
// full padded row is ids followed by pad_id up to 1024.
'use strict'
const fs = require('fs')
const { Tokenizer } = require('tokenizers')

async function main() {
  const [tokFile, eos, pad, dataFile] = process.argv.slice(2)
  const tok = Tokenizer.fromFile(tokFile)
  const padId = tok.tokenToId(pad)
  if (padId === null || padId === undefined) throw new Error(`pad token ${pad} unknown`)
  tok.setTruncation(1024)
  tok.setPadding({ maxLength: 1024, padId, padToken: pad })
  const recs = JSON.parse(fs.readFileSync(dataFile, 'utf8'))
  const out = []
  for (const r of recs) {
    let text = `### Instruction:\n${r.instruction}\n\n`
    if (r.input) text += `### Input:\n${r.input}\n\n`
    text += `### Response:\n${r.output}${eos}`
    const enc = await tok.encode(text)
    const ids = enc.getIds()
    const mask = enc.getAttentionMask()
    if (ids.length !== 1024) throw new Error(`length ${ids.length}`)
    let n = 0
    while (n < mask.length && mask[n] === 1) n++
    for (let j = n; j < 1024; j++) {
      if (mask[j] !== 0 || ids[j] !== padId) throw new Error(`not right-padded at ${j}`)
    }
    out.push(JSON.stringify({ ids: Array.from(ids.slice(0, n)) }))
  }
  process.stdout.write(out.join('\n') + '\n')
}
main().catch((e) => { console.error(e); process.exit(1) })
