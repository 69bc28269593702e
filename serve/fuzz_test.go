package serve

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// FuzzParseHeader feeds arbitrary header pages to ParseHeader: it must never
// panic, and whatever it accepts must describe a ring that fits the memfd
// with every column inside its slot.
func FuzzParseHeader(f *testing.F) {
	for _, p := range [][5]uint32{{3, 4, 8, ModePad, 0}, {2, 5, 1024, ModePack, 0}, {1, 1, 1, ModePad, 0}, {2, 3, 16, ModePack, HelloSourceIDs}} {
		l, _ := NewLayout(p[0], p[1], p[2], p[3], p[4])
		f.Add(l.AppendHeader(nil), l.TotalSize())
	}
	f.Add([]byte("FERRYSHM"), uint64(4096))
	f.Fuzz(func(t *testing.T, b []byte, size uint64) {
		page := make([]byte, ShmHeaderSize)
		copy(page, b)
		l, err := ParseHeader(page, size)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		if l.TotalSize() > size || l.SlotSize%SlotAlign != 0 {
			t.Fatalf("accepted layout %+v does not fit %d bytes", l, size)
		}
		for i, c := range l.Columns {
			if c.Present() && c.Offset+uint64(l.MaxRows)*uint64(c.Width)*c.ItemSize() > l.SlotSize {
				t.Fatalf("column %d overflows its slot: %+v", i, l)
			}
		}
		if !bytes.Equal(l.AppendHeader(nil), page) {
			t.Fatal("accepted header does not re-encode to itself")
		}
	})
}

// FuzzParseMsg feeds arbitrary datagrams to the message parsers the daemon
// and the client run on received bytes.
func FuzzParseMsg(f *testing.F) {
	f.Add(AppendHello(nil, Hello{Version: 1, Slots: 4, MaxRows: 8, Rank: 3, Worker: -1}))
	f.Add(AppendHello(nil, Hello{Version: 1, Slots: 4, MaxRows: 8, Rank: 3, Worker: -1, Flags: HelloSourceIDs}))
	f.Add(AppendWelcome(nil, Welcome{Version: 1, ShmSize: 20480, Info: []byte(`{"ranks":2}`)}))
	f.Add(AppendPlan(nil, []Run{{1, 10, 4, RunContinues}, {3, 4, 1, 0}}))
	f.Add(AppendError(nil, CodeShutdown, "bye"))
	f.Add([]byte{})
	// Seeds from the golden file too: the encodings both clients agree on.
	if b, err := os.ReadFile(goldenPath); err == nil {
		var doc struct {
			Messages map[string]struct{ Hex string } `json:"messages"`
		}
		if json.Unmarshal(b, &doc) == nil {
			for _, m := range doc.Messages {
				if raw, err := hex.DecodeString(m.Hex); err == nil {
					f.Add(raw)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, p, err := ParseMsg(msg)
		if err != nil {
			if !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %v does not wrap ErrProtocol", err)
			}
			return
		}
		switch h.Type {
		case MsgHello:
			if hl, err := ParseHello(p); err == nil {
				if !bytes.Equal(AppendHello(nil, hl), msg) {
					t.Fatal("HELLO does not round-trip")
				}
			}
		case MsgWelcome:
			if w, err := ParseWelcome(p); err == nil && len(w.Info) > len(p) {
				t.Fatal("WELCOME info beyond the payload")
			}
		case MsgPlan:
			if runs, err := ParsePlan(p, nil); err == nil {
				if !bytes.Equal(AppendPlan(nil, runs), msg) {
					t.Fatal("PLAN does not round-trip")
				}
			}
		case MsgError:
			ParseError(p)
		}
	})
}
