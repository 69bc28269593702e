package serve

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/protocol.golden.json")

const goldenPath = "testdata/protocol.golden.json"

// goldenDoc builds the protocol description pinned by the golden file from
// the code: constants, the layouts of two canonical rings and example
// encodings of every message.
func goldenDoc(t *testing.T) map[string]any {
	layout := func(slots, maxRows, seqLen, mode, flags uint32) map[string]any {
		l, err := NewLayout(slots, maxRows, seqLen, mode, flags)
		if err != nil {
			t.Fatal(err)
		}
		cols := []map[string]any{}
		for i, c := range l.Columns {
			cols = append(cols, map[string]any{"id": i, "name": ColumnNames[i], "offset": c.Offset, "dtype": c.DType, "width": c.Width})
		}
		hdr := l.AppendHeader(nil)
		if len(hdr) != ShmHeaderSize {
			t.Fatalf("header is %d bytes", len(hdr))
		}
		if !bytes.Equal(hdr[192:], make([]byte, ShmHeaderSize-192)) {
			t.Fatal("header bytes 192.. not zero")
		}
		slot := make([]byte, SlotHeaderSize)
		PutSlotHeader(slot, SlotHeader{Seq: 0x0102030405060708, Rows: maxRows, State: SlotFilled})
		return map[string]any{
			"params":          map[string]any{"slots": slots, "max_rows": maxRows, "seq_len": seqLen, "mode": mode, "flags": flags},
			"slot_size":       l.SlotSize,
			"total_size":      l.TotalSize(),
			"columns":         cols,
			"header_hex":      hex.EncodeToString(hdr[:192]),
			"slot_header":     map[string]any{"seq": uint64(0x0102030405060708), "rows": maxRows, "state": SlotFilled},
			"slot_header_hex": hex.EncodeToString(slot),
		}
	}
	runs := []Run{{File: 1, Row: 10, Rows: 4, Flags: RunContinues}, {File: 3, Row: 0xfffffffe, Rows: 1}, {File: 0, Row: 7, Rows: 5}}
	return map[string]any{
		"version":                 Version,
		"msg_magic":               MsgMagic,
		"msg_header_size":         MsgHeaderSize,
		"max_msg_size":            MaxMsgSize,
		"max_rows":                MaxRows,
		"max_runs_per_msg":        MaxRunsPerMsg,
		"max_plan_ahead":          MaxPlanAhead,
		"run_continues":           RunContinues,
		"max_slots":               MaxSlots,
		"shm_magic":               ShmMagic,
		"shm_header_size":         ShmHeaderSize,
		"shm_column_table_offset": ShmColumnTableOffset,
		"shm_column_entry_size":   ShmColumnEntrySize,
		"slot_header_size":        SlotHeaderSize,
		"slot_align":              SlotAlign,
		"column_align":            ColumnAlign,
		"msg_types": map[string]any{"hello": MsgHello, "welcome": MsgWelcome, "plan": MsgPlan, "error": MsgError,
			"file": MsgFile, "file_data": MsgFileData},
		"error_codes": map[string]any{"bad_request": CodeBadRequest, "not_served": CodeNotServed, "limit": CodeLimit,
			"shutdown": CodeShutdown, "io": CodeIO},
		"dtypes":      map[string]any{"int32": DTypeInt32, "int64": DTypeInt64},
		"hello_flags": map[string]any{"source_ids": HelloSourceIDs},
		"columns":     ColumnNames,
		"messages": map[string]any{
			"hello": map[string]any{"fields": map[string]any{"version": 1, "slots": 4, "max_rows": 8, "rank": 3, "worker": -1},
				"hex": hex.EncodeToString(AppendHello(nil, Hello{Version: 1, Slots: 4, MaxRows: 8, Rank: 3, Worker: -1}))},
			"hello_sources": map[string]any{"fields": map[string]any{"version": 1, "slots": 4, "max_rows": 8, "rank": 0, "worker": 2, "flags": HelloSourceIDs},
				"hex": hex.EncodeToString(AppendHello(nil, Hello{Version: 1, Slots: 4, MaxRows: 8, Rank: 0, Worker: 2, Flags: HelloSourceIDs}))},
			"welcome": map[string]any{"fields": map[string]any{"version": 1, "shm_size": 20480, "info": `{"ranks":2}`},
				"hex": hex.EncodeToString(AppendWelcome(nil, Welcome{Version: 1, ShmSize: 20480, Info: []byte(`{"ranks":2}`)}))},
			"plan": map[string]any{"fields": map[string]any{"runs": [][4]uint32{{1, 10, 4, 1}, {3, 0xfffffffe, 1, 0}, {0, 7, 5, 0}}},
				"hex": hex.EncodeToString(AppendPlan(nil, runs))},
			"file": map[string]any{"fields": map[string]any{"path": "s3://models/qwen", "file": "model-00001-of-00002.safetensors", "offset": 8, "length": 4096},
				"hex": hex.EncodeToString(appendJSONMsg(MsgFile, FileRequest{Path: "s3://models/qwen", File: "model-00001-of-00002.safetensors", Offset: 8, Length: 4096}))},
			"file_data": map[string]any{"fields": map[string]any{"size": 4096, "file_size": 1 << 32, "missing": false},
				"hex": hex.EncodeToString(appendJSONMsg(MsgFileData, FileData{Size: 4096, FileSize: 1 << 32}))},
			"file_data_missing": map[string]any{"fields": map[string]any{"size": 0, "file_size": 0, "missing": true},
				"hex": hex.EncodeToString(appendJSONMsg(MsgFileData, FileData{Missing: true}))},
			"error": map[string]any{"fields": map[string]any{"code": CodeShutdown, "text": "ferry-serve is shutting down"},
				"hex": hex.EncodeToString(AppendError(nil, CodeShutdown, "ferry-serve is shutting down"))},
		},
		"layouts": map[string]any{
			"pad":          layout(3, 4, 8, ModePad, 0),
			"pack":         layout(2, 5, 1024, ModePack, 0),
			"pack_sources": layout(2, 5, 1024, ModePack, HelloSourceIDs),
		},
	}
}

func TestProtocolGolden(t *testing.T) {
	got, err := json.MarshalIndent(goldenDoc(t), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(goldenPath, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(goldenPath)
	if err != nil {
		t.Fatalf("%v (run go test ./serve -run Golden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("protocol changed: %s differs from the code; if intended, bump Version, run -update and update the Python client\ngot:\n%s", goldenPath, got)
	}
	// The golden encodings must also decode back to their fields.
	var doc struct {
		Messages map[string]struct {
			Hex string `json:"hex"`
		} `json:"messages"`
		Layouts map[string]struct {
			HeaderHex  string `json:"header_hex"`
			TotalSize  uint64 `json:"total_size"`
			SlotHeader string `json:"slot_header_hex"`
		} `json:"layouts"`
	}
	if err := json.Unmarshal(want, &doc); err != nil {
		t.Fatal(err)
	}
	runs := []Run{{File: 1, Row: 10, Rows: 4, Flags: RunContinues}, {File: 3, Row: 0xfffffffe, Rows: 1}, {File: 0, Row: 7, Rows: 5}}
	msg := func(name string, typ uint16) []byte {
		b, _ := hex.DecodeString(doc.Messages[name].Hex)
		h, p, err := ParseMsg(b)
		if err != nil || h.Type != typ {
			t.Fatalf("%s: %v, type %d", name, err, h.Type)
		}
		return p
	}
	var fr FileRequest
	if err := json.Unmarshal(msg("file", MsgFile), &fr); err != nil || fr != (FileRequest{"s3://models/qwen", "model-00001-of-00002.safetensors", 8, 4096}) {
		t.Errorf("file: %+v %v", fr, err)
	}
	var fd FileData
	if err := json.Unmarshal(msg("file_data", MsgFileData), &fd); err != nil || fd != (FileData{Size: 4096, FileSize: 1 << 32}) {
		t.Errorf("file_data: %+v %v", fd, err)
	}
	if h, err := ParseHello(msg("hello", MsgHello)); err != nil || h != (Hello{Version: 1, Slots: 4, MaxRows: 8, Rank: 3, Worker: -1}) {
		t.Errorf("hello: %+v %v", h, err)
	}
	if h, err := ParseHello(msg("hello_sources", MsgHello)); err != nil || h != (Hello{Version: 1, Slots: 4, MaxRows: 8, Rank: 0, Worker: 2, Flags: HelloSourceIDs}) {
		t.Errorf("hello_sources: %+v %v", h, err)
	}
	if w, err := ParseWelcome(msg("welcome", MsgWelcome)); err != nil || w.ShmSize != 20480 || string(w.Info) != `{"ranks":2}` {
		t.Errorf("welcome: %+v %v", w, err)
	}
	if rs, err := ParsePlan(msg("plan", MsgPlan), nil); err != nil || len(rs) != 3 || rs[0] != runs[0] || rs[1] != runs[1] || rs[2] != runs[2] {
		t.Errorf("plan: %+v %v", rs, err)
	}
	if c, text, err := ParseError(msg("error", MsgError)); err != nil || c != CodeShutdown || text != "ferry-serve is shutting down" {
		t.Errorf("error: %d %q %v", c, text, err)
	}
	for name, l := range doc.Layouts {
		b, _ := hex.DecodeString(l.HeaderHex)
		page := make([]byte, ShmHeaderSize)
		copy(page, b)
		if _, err := ParseHeader(page, l.TotalSize); err != nil {
			t.Errorf("layout %s: %v", name, err)
		}
		sh, _ := hex.DecodeString(l.SlotHeader)
		if h := ReadSlotHeader(sh); h.Seq != 0x0102030405060708 || h.State != SlotFilled {
			t.Errorf("layout %s: slot header %+v", name, h)
		}
	}
}
