#!/usr/bin/env node
// Superseded by hf_tokenize.py (HF tokenizers' Python binding, the same flags
// and outputs), which bench/cmd/bench runs; kept only for bench/tokenize,
// until that tool runs hf_tokenize.py --bench too.
//
// Anchor: Hugging Face `tokenizers` (the Rust library, through its Node
// binding), the tokenizer transformers' AutoTokenizer uses.
//
//   node hf-tokenize.js --tokenizer DIR_OR_tokenizer.json [--no-special] [IN] > OUT.jsonl
//   node hf-tokenize.js --tokenizer T --alpaca --eos '<|endoftext|>' \
//        --max-length 1024 --pad --out none --bench-line alpaca_data.json
//   node hf-tokenize.js --tokenizer T --bench [--runs 5] [--warmup 1] IN.jsonl
//
// Input (IN, or stdin when absent):
//   default   JSONL, one {"text": "..."} per line.
//   --alpaca  Alpaca records, as a JSON array or JSON Lines, each with
//             "instruction", "output" and optional "input", formatted as the
//             seed workloads do:
//               "### Instruction:\n{instruction}\n\n"
//               + "### Input:\n{input}\n\n"            (only when input is non-empty)
//               + "### Response:\n{output}{eos}"       (eos from --eos)
// Output: JSONL, one {"ids": [...]} per input text, same order, to --out FILE
//   (default "-", stdout); --out none discards the IDs (only their count is
//   kept), which makes this the fastest HF can go: tokenization alone.
// --no-special      add_special_tokens=false (default true, like AutoTokenizer(text)).
// --max-length N    truncation=True, max_length=N (the specials the
//                   post-processor adds count against N, as in transformers).
// --pad             with --max-length: padding="max_length", right side, pad
//                   token --pad-token (default: the --eos token, as the seeds
//                   set tokenizer.pad_token = tokenizer.eos_token).
// --batch N         texts per encodeBatch call (default 1024).
// --bench-line      after the output, print one line
//                   {"bench": {"load_s", "read_s", "encode_s", "lines", "bytes",
//                   "tokens", "encode_mb_per_s", "tokens_per_s"}} on stdout, where
//                   encode_s is the time spent in encodeBatch alone (not in
//                   copying IDs into JS arrays or writing them; MB = 1e6
//                   bytes of UTF-8 text).
// --bench           the original reference tool's mode: time encodeBatch over
//                   the whole input --runs times after --warmup; print one JSON
//                   object (wall and CPU medians).
// Threads: encodeBatch runs on a rayon pool; RAYON_NUM_THREADS=N sets its size
//   (TOKENIZERS_PARALLELISM=false makes it sequential). Default: one per CPU.
// Setup: npm install tokenizers@0.23.2 into a directory outside the repository
//   (scripts/setup-test-deps does it with FERRY_BENCH_DEPS=1) and run with
//   NODE_PATH=that/node_modules.
//
// Ported from ferry's reference tool hf-tokenize.js (Apache-2.0); the Alpaca
// formatting, truncation/padding, --out and --bench-line are additions.
'use strict'
const fs = require('fs')
const os = require('os')
const path = require('path')

function usage(msg) {
  process.stderr.write(`hf-tokenize: ${msg}\nusage: node hf-tokenize.js --tokenizer T [--no-special] [--alpaca --eos TOK] [--max-length N [--pad] [--pad-token TOK]] [--out FILE|-|none] [--batch N] [--bench-line] [IN]\n`)
  process.exit(2)
}

function parseArgs(argv) {
  const o = {
    special: true, bench: false, benchLine: false, runs: 5, warmup: 1, batch: 1024, input: null, tokenizer: null,
    alpaca: false, eos: null, maxLength: 0, pad: false, padToken: null, out: '-',
  }
  const need = (i) => { if (i + 1 >= argv.length) usage(`${argv[i]} needs a value`); return argv[i + 1] }
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]
    if (a === '--tokenizer') o.tokenizer = need(i++)
    else if (a === '--no-special') o.special = false
    else if (a === '--special') o.special = true
    else if (a === '--bench') o.bench = true
    else if (a === '--bench-line') o.benchLine = true
    else if (a === '--runs') o.runs = Number(need(i++))
    else if (a === '--warmup') o.warmup = Number(need(i++))
    else if (a === '--batch') o.batch = Number(need(i++))
    else if (a === '--alpaca') o.alpaca = true
    else if (a === '--eos') o.eos = need(i++)
    else if (a === '--max-length') o.maxLength = Number(need(i++))
    else if (a === '--pad') o.pad = true
    else if (a === '--pad-token') o.padToken = need(i++)
    else if (a === '--out') o.out = need(i++)
    else if (a.startsWith('--')) usage(`unknown flag ${a}`)
    else if (o.input !== null) usage('more than one input file')
    else o.input = a
  }
  if (!o.tokenizer) usage('--tokenizer is required')
  if (o.alpaca && o.eos === null) usage('--alpaca needs --eos (the seeds append tokenizer.eos_token)')
  if (!(Number.isInteger(o.batch) && o.batch > 0)) usage('--batch must be a positive integer')
  if (!(Number.isInteger(o.maxLength) && o.maxLength >= 0)) usage('--max-length must be a non-negative integer')
  if (o.pad && o.maxLength === 0) usage('--pad needs --max-length')
  if (o.pad && o.padToken === null) o.padToken = o.eos
  if (o.pad && o.padToken === null) usage('--pad needs --pad-token or --eos')
  return o
}

function readTexts(input) {
  const raw = fs.readFileSync(input === null ? 0 : input, 'utf8')
  const lines = raw.split('\n')
  if (lines.length && lines[lines.length - 1] === '') lines.pop()
  return lines.map((l, i) => {
    let v
    try { v = JSON.parse(l) } catch (e) { throw new Error(`${input}: line ${i + 1}: ${e.message}`) }
    if (typeof v.text !== 'string') throw new Error(`${input}: line ${i + 1}: no "text" string`)
    return v.text
  })
}

// readAlpaca returns the formatted prompt of every record (JSON array or JSONL).
function readAlpaca(input, eos) {
  const raw = fs.readFileSync(input === null ? 0 : input, 'utf8')
  let recs
  if (raw.trimStart().startsWith('[')) {
    recs = JSON.parse(raw)
  } else {
    recs = raw.split('\n').filter((l) => l.trim() !== '').map((l, i) => {
      try { return JSON.parse(l) } catch (e) { throw new Error(`${input}: line ${i + 1}: ${e.message}`) }
    })
  }
  return recs.map((r, i) => {
    for (const k of ['instruction', 'output']) {
      if (typeof r[k] !== 'string') throw new Error(`${input}: record ${i}: "${k}" is not a string`)
    }
    let p = `### Instruction:\n${r.instruction}\n\n`
    if (r.input) p += `### Input:\n${r.input}\n\n`
    return `${p}### Response:\n${r.output}${eos}`
  })
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[(s.length - 1) >> 1] }
const now = () => Number(process.hrtime.bigint()) / 1e9

async function main() {
  const o = parseArgs(process.argv.slice(2))
  const t0 = now()
  const { Tokenizer } = require('tokenizers')
  let tf = o.tokenizer
  if (fs.statSync(tf).isDirectory()) tf = path.join(tf, 'tokenizer.json')
  const tok = Tokenizer.fromFile(tf)
  if (o.maxLength > 0) tok.setTruncation(o.maxLength)
  if (o.pad) {
    const padId = tok.tokenToId(o.padToken)
    if (padId === null || padId === undefined) throw new Error(`pad token ${JSON.stringify(o.padToken)} is not in the vocabulary`)
    tok.setPadding({ maxLength: o.maxLength, padId, padToken: o.padToken })
  }
  const t1 = now()
  const texts = o.alpaca ? readAlpaca(o.input, o.eos) : readTexts(o.input)
  const t2 = now()
  const opts = { addSpecialTokens: o.special }
  const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t, 'utf8'), 0)

  if (o.bench) {
    let tokens = 0
    for (let w = 0; w < Math.max(1, o.warmup); w++) {
      const encs = await tok.encodeBatch(texts, opts)
      tokens = encs.reduce((n, e) => n + e.getLength(), 0)
    }
    const secs = [], cpus = []
    const load = os.loadavg()[0]
    for (let r = 0; r < o.runs; r++) {
      const s0 = now(), c0 = process.cpuUsage()
      await tok.encodeBatch(texts, opts)
      secs.push(now() - s0)
      const c = process.cpuUsage(c0) // whole process, all threads
      cpus.push((c.user + c.system) / 1e6)
    }
    const s = median(secs), cs = median(cpus)
    const env = ['RAYON_NUM_THREADS', 'RAYON_RS_NUM_CPUS', 'TOKENIZERS_PARALLELISM']
      .filter((k) => process.env[k] !== undefined).map((k) => `${k}=${process.env[k]}`).join(' ') || 'default threads'
    console.log(JSON.stringify({
      tokenizer: o.tokenizer, env, lines: texts.length, bytes, tokens, add_special_tokens: o.special,
      loadavg1_before: +load.toFixed(2), runs_s: secs.map((x) => +x.toFixed(3)), median_s: +s.toFixed(3),
      MB_per_s: +(bytes / s / 1e6).toFixed(3), tokens_per_s: Math.round(tokens / s),
      median_cpu_s: +cs.toFixed(3), MB_per_cpu_s: +(bytes / cs / 1e6).toFixed(3), tokens_per_cpu_s: Math.round(tokens / cs),
    }))
    return
  }

  let out = null
  if (o.out === '-') out = fs.createWriteStream(null, { fd: 1, autoClose: false })
  else if (o.out !== 'none') out = fs.createWriteStream(o.out)
  let tokens = 0, encodeS = 0
  for (let i = 0; i < texts.length; i += o.batch) {
    const batch = texts.slice(i, i + o.batch)
    const s0 = now()
    const encs = await tok.encodeBatch(batch, opts)
    encodeS += now() - s0
    let chunk = null
    if (out !== null) {
      const ids = encs.map((e) => e.getIds())
      for (const x of ids) tokens += x.length
      chunk = ids.map((x) => JSON.stringify({ ids: x })).join('\n') + '\n'
    } else {
      for (const e of encs) tokens += e.getLength()
    }
    if (chunk !== null && !out.write(chunk)) await new Promise((r) => out.once('drain', r))
  }
  if (out !== null) await new Promise((r) => out.end(r))
  if (o.benchLine) {
    const line = JSON.stringify({ bench: {
      load_s: +(t1 - t0).toFixed(4), read_s: +(t2 - t1).toFixed(4), encode_s: +encodeS.toFixed(4),
      lines: texts.length, bytes, tokens,
      encode_mb_per_s: +(bytes / encodeS / 1e6).toFixed(3), tokens_per_s: Math.round(tokens / encodeS),
    } }) + '\n'
    // After the IDs on stdout (the stream above has ended), or alone.
    fs.writeSync(1, line)
  }
}

main().catch((e) => { console.error(`hf-tokenize: ${e.stack || String(e)}`); process.exit(1) })
