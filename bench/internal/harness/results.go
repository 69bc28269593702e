package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// Schema identifies the results document format.
const Schema = "ferry-bench/1"

// Machine records where the results were measured.
type Machine struct {
	Host          string            `json:"host"`
	OS            string            `json:"os"`
	Arch          string            `json:"arch"`
	CPUs          int               `json:"cpus"`
	CPUModel      string            `json:"cpu_model"`
	MemTotalBytes int64             `json:"mem_total_bytes"`
	Kernel        string            `json:"kernel"`
	Go            string            `json:"go"`
	Tools         map[string]string `json:"tools"`
	GitCommit     string            `json:"git_commit"`
	LoadAvgStart  string            `json:"loadavg_start"`
	LoadAvgEnd    string            `json:"loadavg_end"`
}

// Results is the document a bench run writes.
type Results struct {
	Schema   string      `json:"schema"`
	Mode     string      `json:"mode"`
	Started  time.Time   `json:"started"`
	Finished time.Time   `json:"finished"`
	Machine  Machine     `json:"machine"`
	Inputs   []string    `json:"inputs,omitempty"` // what each input is, one line each
	Jobs     []JobResult `json:"jobs"`
}

// WriteJSON writes r as indented JSON.
func (r *Results) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadResults decodes a results document and checks its schema.
func ReadResults(rd io.Reader) (*Results, error) {
	var r Results
	dec := json.NewDecoder(rd)
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("harness: results: %w", err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("harness: results: schema %q, want %q", r.Schema, Schema)
	}
	return &r, nil
}

// FormatValue renders a metric value with its unit, with three significant
// digits or so.
func FormatValue(v float64, unit string) string {
	var s string
	switch a := math.Abs(v); {
	case a == 0:
		s = "0"
	case a >= 100:
		s = fmt.Sprintf("%.0f", v)
	case a >= 10:
		s = fmt.Sprintf("%.1f", v)
	case a >= 1:
		s = fmt.Sprintf("%.2f", v)
	default:
		s = fmt.Sprintf("%.3g", v)
	}
	if unit == "" {
		return s
	}
	return s + " " + unit
}

// FormatRatio renders a ratio summary as "12.3× [11.0–13.1]".
func FormatRatio(s Summary) string {
	return fmt.Sprintf("%s× [%s–%s]", ratioNum(s.Median), ratioNum(s.Min), ratioNum(s.Max))
}

func ratioNum(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// FormatBytes renders a byte count in MiB ("—" for 0, not measured).
func FormatBytes(n int64) string {
	if n <= 0 {
		return "—"
	}
	mib := float64(n) / (1 << 20)
	if mib >= 100 {
		return fmt.Sprintf("%.0f MiB", mib)
	}
	return fmt.Sprintf("%.1f MiB", mib)
}

// row is one line of the table, shared by the text and markdown renderers.
type row struct {
	job, ferry, anchor, ratio, rssF, rssA string
}

func rows(r *Results) []row {
	out := make([]row, 0, len(r.Jobs))
	for _, j := range r.Jobs {
		x := row{job: j.Name, ferry: "—", anchor: "—", rssF: "—", rssA: "—"}
		switch j.Status {
		case StatusOK:
			x.ferry = FormatValue(j.Ferry.Value.Median, j.Metric.Unit)
			x.anchor = FormatValue(j.Anchor.Value.Median, j.Metric.Unit)
			x.ratio = FormatRatio(j.Ratio)
			x.rssF = FormatBytes(j.Ferry.PeakRSSBytes)
			x.rssA = FormatBytes(j.Anchor.PeakRSSBytes)
			if j.Anchor.PeakRSSBytes == 0 && len(j.Anchor.Samples) == 0 {
				x.rssA = "(same process)"
			}
		default:
			x.ratio = j.Status + ": " + gist(j.Reason)
		}
		out = append(out, x)
		for _, e := range j.Extra {
			out = append(out, row{
				job:   "  └ " + e.Metric.Name,
				ferry: FormatValue(e.Ferry.Median, e.Metric.Unit), anchor: FormatValue(e.Anchor.Median, e.Metric.Unit),
				ratio: FormatRatio(e.Ratio), rssF: "", rssA: "",
			})
		}
	}
	return out
}

// gist is the line of a failure reason that says most: the last non-empty
// line (for a failed run, the end of its stderr: the error itself), clipped.
func gist(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if len(lines) > 1 {
		last = strings.TrimSpace(lines[0][:strings.Index(lines[0]+":", ":")]) + ": … " + last
	}
	return firstLine(last)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	const max = 100
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// WriteTable writes the plain-text summary table.
func (r *Results) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "job\tferry\tanchor\tferry advantage (>1 = better), median [min–max]\tpeak RSS ferry\tpeak RSS anchor")
	for _, x := range rows(r) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.job, x.ferry, x.anchor, x.ratio, x.rssF, x.rssA)
	}
	return tw.Flush()
}

// WriteMarkdown writes the report: the machine, the method, the table, what
// each job compared and the chart.
func (r *Results) WriteMarkdown(w io.Writer, chartPath string) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# ferry benchmarks (%s mode)\n\n", r.Mode)
	fmt.Fprintf(&b, "Measured %s on `%s`: %d × %s, %s RAM, %s/%s, kernel %s, %s, commit `%s`.\n",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), md(m.Host), m.CPUs, md(m.CPUModel),
		FormatBytes(m.MemTotalBytes), m.OS, m.Arch, md(m.Kernel), m.Go, md(m.GitCommit))
	if len(m.Tools) > 0 {
		b.WriteString("Tools: ")
		for i, k := range sortedKeys(m.Tools) {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s %s", k, md(m.Tools[k]))
		}
		b.WriteString(".\n")
	}
	fmt.Fprintf(&b, "Load average at start %s, at end %s.\n\n", m.LoadAvgStart, m.LoadAvgEnd)
	b.WriteString("Method: every job runs ferry and its anchor as subprocesses on the same machine in the same run, " +
		"a warm-up run of each, then alternating runs (ferry, anchor, ferry, anchor, …); scripts that measure both sides " +
		"in one process (the feed jobs) run without the harness's warm-up and repeat inside. " +
		"Each figure is the median over the pairs. The ratio is computed pair by pair and reads as ferry's advantage: " +
		"anchor ÷ ferry for times and memory, ferry ÷ anchor for throughputs, so > 1 means ferry is better; " +
		"its median and min–max over the pairs are shown. Rows marked └ are further figures from the same runs " +
		"(measured inside each process). Peak RSS is the kernel's ru_maxrss of the command (and the children it waited for), " +
		"the maximum over the measured runs.\n\n")
	if len(r.Inputs) > 0 {
		b.WriteString("Inputs:\n\n")
		for _, in := range r.Inputs {
			fmt.Fprintf(&b, "- %s\n", in)
		}
		b.WriteString("\n")
	}
	b.WriteString("| job | ferry | anchor | ferry advantage (>1 = better), median [min–max] | peak RSS ferry | peak RSS anchor |\n")
	b.WriteString("|---|---:|---:|---|---:|---:|\n")
	for _, x := range rows(r) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", md(x.job), x.ferry, x.anchor, md(x.ratio), x.rssF, x.rssA)
	}
	if chartPath != "" {
		fmt.Fprintf(&b, "\n![ferry speed-up per job](%s)\n", chartPath)
	}
	b.WriteString("\n## Jobs\n\n")
	for _, j := range r.Jobs {
		fmt.Fprintf(&b, "### %s\n\n", md(j.Name))
		fmt.Fprintf(&b, "- metric: `%s` (%s, %s is better)\n", j.Metric.Name, j.Metric.Unit, betterWord(j.Metric))
		fmt.Fprintf(&b, "- ferry: %s — `%s`\n", md(j.Ferry.Label), j.Ferry.Command)
		fmt.Fprintf(&b, "- anchor: %s — `%s`\n", md(j.Anchor.Label), j.Anchor.Command)
		switch j.Status {
		case StatusOK:
			fmt.Fprintf(&b, "- ferry %s [%s–%s], anchor %s [%s–%s], speed-up %s over %d pairs (per pair: %s)\n",
				FormatValue(j.Ferry.Value.Median, j.Metric.Unit), FormatValue(j.Ferry.Value.Min, ""), FormatValue(j.Ferry.Value.Max, ""),
				FormatValue(j.Anchor.Value.Median, j.Metric.Unit), FormatValue(j.Anchor.Value.Min, ""), FormatValue(j.Anchor.Value.Max, ""),
				FormatRatio(j.Ratio), j.Pairs, ratioList(j.Ratios))
		default:
			fmt.Fprintf(&b, "- **%s**: %s\n", j.Status, md(strings.TrimSpace(j.Reason)))
		}
		for _, e := range j.Extra {
			fmt.Fprintf(&b, "- also `%s` (%s, %s is better, measured inside each process): ferry %s, anchor %s, speed-up %s\n",
				e.Metric.Name, e.Metric.Unit, betterWord(e.Metric), FormatValue(e.Ferry.Median, e.Metric.Unit),
				FormatValue(e.Anchor.Median, e.Metric.Unit), FormatRatio(e.Ratio))
		}
		if j.Check != "" {
			fmt.Fprintf(&b, "- check: %s\n", md(j.Check))
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func betterWord(m Metric) string {
	if m.HigherIsBetter {
		return "higher"
	}
	return "lower"
}

func ratioList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = ratioNum(x)
	}
	return strings.Join(parts, ", ")
}

// md escapes the characters that would break a markdown table cell.
func md(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
