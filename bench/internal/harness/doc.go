// Package harness runs side-by-side benchmarks of ferry against the tools
// people use today (the "anchors") and turns the samples into trustworthy
// figures: medians, min–max ranges and ratios computed pair by pair.
//
// # Method
//
// Each job has two sides, ferry and its anchor, each a subprocess. After a
// warm-up run of each side (not counted), the sides alternate (A B A B …)
// for a fixed number of pairs. Every run is measured by the harness itself:
// wall time from start to exit, and peak resident set size from the
// kernel's rusage of the reaped child (ru_maxrss, which covers the child and
// the descendants it waited for). Commands are started through a small
// launcher process (a copy of the harness binary in launcher mode, see
// [LaunchMain]) because a child started directly by a Go program inherits
// the parent's high-water RSS in ru_maxrss; through the launcher a command
// is charged its own memory, from a floor of about 2 MB. Before each run
// an untimed set-up hook may clear the previous run's output. A side may also print, as the
// last non-empty line of its standard output, a bench line
//
//	{"bench": {"metric": number, ...}}
//
// whose numbers become extra metrics of that run (throughput measured inside
// the process, per-batch cost, ...). The job names the metric it compares;
// "wall_s" is the harness's own wall time.
//
// The ratio of a pair is expressed as ferry's speed-up, so that > 1 always
// means ferry is better: anchor/ferry for lower-is-better metrics (seconds),
// ferry/anchor for higher-is-better ones (MB/s). Jobs may add extra metrics
// from the same runs (e.g. the encode throughput each side measures inside
// its process next to the job's wall time); a job may also check the two
// sides' outputs once (identical token IDs, identical tensors) and fails if
// they differ, since a fast wrong answer is no result. Ratios are taken pair by
// pair, because the machine is shared and noisy: two runs next to each other
// see the same background load, runs minutes apart do not.
//
// # Concurrency
//
// Nothing in this package is safe for concurrent use; the harness runs one
// subprocess at a time on purpose, so that the two sides never compete.
//
// # Results file
//
// Results are written as one JSON document (see [Results]):
//
//	{
//	  "schema": "ferry-bench/1",
//	  "mode": "quick" | "full",
//	  "started": RFC 3339, "finished": RFC 3339,
//	  "machine": {"host", "os", "arch", "cpus", "cpu_model", "mem_total_bytes",
//	              "kernel", "go", "tools": {"node": ..., "tokenizers": ..., ...},
//	              "git_commit", "loadavg_start", "loadavg_end"},
//	  "jobs": [{
//	    "name", "group", "metric": {"name", "unit", "higher_is_better"},
//	    "status": "ok" | "not available" | "failed", "reason",
//	    "pairs", "warmup",
//	    "ferry":  {"label", "command", "samples": [{"wall_s", "peak_rss_bytes", "metrics"}],
//	               "value": {"median", "min", "max", "n"}, "peak_rss_bytes": max over runs},
//	    "anchor": {... the same ...},
//	    "ratio": {"median", "min", "max", "n"}, "ratios": [per pair],
//	    "check": "what was verified about the outputs, if anything"
//	  }]
//	}
package harness
