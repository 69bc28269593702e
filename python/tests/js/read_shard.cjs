// Reads one ferry shard with Apache Arrow's JavaScript implementation (a
// second, independent Arrow reader) and prints its columns as JSON:
// {"rows": N, "batches": [rows...], "input_ids": [[...]], "labels": ..., "length": [...],
//  "position_ids": ... (pack), "segments": [[[sample, start, length], ...], ...], "metadata": {...}}
// usage: node read_shard.cjs SHARD.arrow   (NODE_PATH or FERRY_NODE_MODULES finds apache-arrow)
const fs = require("fs");
const path = require("path");
const mods = process.env.FERRY_NODE_MODULES || path.join(process.env.HOME || "", ".cache/ferry/npm/node_modules");
const arrow = require(path.join(mods, "apache-arrow"));

const bytes = fs.readFileSync(process.argv[2]);
const reader = arrow.RecordBatchReader.from(bytes);
const out = { rows: 0, batches: [], input_ids: [], labels: [], length: [], segments: [], metadata: {} };
reader.open();
for (const [k, v] of reader.schema.metadata) out.metadata[k] = v;
const hasPos = reader.schema.fields.some((f) => f.name === "position_ids");
if (hasPos) out.position_ids = [];
for (const batch of reader) {
  out.batches.push(batch.numRows);
  out.rows += batch.numRows;
  const col = (n) => batch.getChild(n);
  for (let i = 0; i < batch.numRows; i++) {
    out.input_ids.push(Array.from(col("input_ids").get(i)));
    out.labels.push(Array.from(col("labels").get(i)));
    if (hasPos) out.position_ids.push(Array.from(col("position_ids").get(i)));
    out.length.push(col("length").get(i));
    const segs = [];
    const s = col("segments").get(i);
    for (let j = 0; j < s.length; j++) {
      const seg = s.get(j);
      segs.push([Number(seg.sample), seg.start, seg.length]);
    }
    out.segments.push(segs);
  }
}
process.stdout.write(JSON.stringify(out));
