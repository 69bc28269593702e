package tokenize

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferryml/ferry/tokenize/internal/le"
)

// TestMain points the compiled cache at a temporary directory: tests never
// write to the user's cache.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ferry-tokenize-cache-")
	if err != nil {
		panic(err)
	}
	os.Setenv("FERRY_TOKENIZER_CACHE", dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// sameTokenizer reports whether a and b are deeply equal but for where the
// encode loop's tables live: the copies upgradeTables makes in huge pages
// (fast, and the le.Mem of each table), whose contents are compared
// instead. It waits for both upgrades, and must not run beside other uses
// of a or b.
func sameTokenizer(a, b *Tokenizer) bool {
	a.model.upgrading.Wait()
	b.model.upgrading.Wait()
	fa, fb := a.model.fast.Load(), b.model.fast.Load()
	if !slices.Equal(fa.words.slots, a.model.words.slots) || !slices.Equal(fa.merges.slots, a.model.merges.slots) ||
		!slices.Equal(fb.words.slots, b.model.words.slots) || !slices.Equal(fb.merges.slots, b.model.merges.slots) {
		return false // a copy differs from its table
	}
	ma := [2]*le.Mem{a.model.words.mem, a.model.merges.mem}
	mb := [2]*le.Mem{b.model.words.mem, b.model.merges.mem}
	a.model.fast.Store(nil)
	b.model.fast.Store(nil)
	a.model.words.mem, a.model.merges.mem, b.model.words.mem, b.model.merges.mem = nil, nil, nil, nil
	eq := reflect.DeepEqual(a, b)
	a.model.fast.Store(fa)
	b.model.fast.Store(fb)
	a.model.words.mem, a.model.merges.mem, b.model.words.mem, b.model.merges.mem = ma[0], ma[1], mb[0], mb[1]
	return eq
}

// TestCompiledSame holds every family's tokenizer read from the compiled
// cache to the one parsed from tokenizer.json: all of it, field by field.
func TestCompiledSame(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			t.Setenv("FERRY_TOKENIZER_CACHE", "off")
			parsed, err := Load(filepath.Join(fixtures, fam))
			if err != nil {
				t.Fatal(err)
			}
			t.Setenv("FERRY_TOKENIZER_CACHE", t.TempDir())
			for i, wantCompiled := range []bool{false, true} {
				tok, err := Load(filepath.Join(fixtures, fam))
				if err != nil {
					t.Fatal(err)
				}
				if tok.compiled != wantCompiled {
					t.Fatalf("Load %d: compiled %v, want %v", i+1, tok.compiled, wantCompiled)
				}
				tok.compiled = false
				if !sameTokenizer(tok, parsed) {
					t.Fatalf("Load %d (compiled %v): the tokenizer differs from the parsed one", i+1, wantCompiled)
				}
			}
		})
	}
}

// TestCompiledMapped: a tokenizer read from the cache (its tables and
// token strings in the mapped file) stays whole after the file is deleted
// and rewritten, through garbage collections.
func TestCompiledMapped(t *testing.T) {
	dir := filepath.Join(fixtures, "llama3.1")
	t.Setenv("FERRY_TOKENIZER_CACHE", "off")
	parsed, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv("FERRY_TOKENIZER_CACHE", cache)
	var toks []*Tokenizer
	for i, wantCompiled := range []bool{false, true, false, true} {
		tok, err := Load(dir)
		if err != nil || tok.compiled != wantCompiled {
			t.Fatalf("Load %d: %v, compiled %v", i+1, err, tok != nil && tok.compiled)
		}
		toks = append(toks, tok)
		if i == 1 {
			// The next Load writes the file again.
			if err := os.Remove(compiledFile(t, cache)); err != nil {
				t.Fatal(err)
			}
		}
		runtime.GC()
	}
	text := "Hello, world! ſ 123 <|begin_of_text|>"
	want := parsed.Encode(text, true)
	for i, tok := range toks {
		runtime.GC()
		if got := tok.Encode(text, true); !slices.Equal(got, want) {
			t.Fatalf("tokenizer %d: %v, want %v", i+1, got, want)
		}
		if got, ok := tok.Token(want[1]); !ok || got != parsed.tokens[want[1]] {
			t.Fatalf("tokenizer %d: token %d is %q", i+1, want[1], got)
		}
		tok.compiled = false
		if !sameTokenizer(tok, parsed) {
			t.Fatalf("tokenizer %d differs from the parsed one", i+1)
		}
	}
}

// writeTiny writes tinyJSON as dir/tokenizer.json.
func writeTiny(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), marshal(t, tinyJSON()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// compiledFile returns the only compiled file in dir, which holds source
// index files (.ferrysrc) beside it and nothing else.
func compiledFile(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"))
	files := slices.DeleteFunc(slices.Clone(m), func(f string) bool { return strings.HasSuffix(f, ".ferrysrc") })
	if err != nil || len(files) != 1 || !strings.HasSuffix(files[0], ".ferrytok") {
		t.Fatalf("cache dir holds %q, want one .ferrytok file and .ferrysrc files", m)
	}
	return files[0]
}

// refix sets the body length and both checksums of a compiled file.
func refix(b []byte) []byte {
	if len(b) < compiledHeader {
		return b
	}
	le := binary.LittleEndian
	le.PutUint64(b[80:], uint64(len(b)-compiledHeader))
	le.PutUint32(b[88:], crc32.Checksum(b[compiledHeader:], castagnoli))
	le.PutUint32(b[92:], crc32.Checksum(b[:92], castagnoli))
	return b
}

// TestCompiledIndex: the source index is a guess that Load checks against
// the source's hash. Load writes it with the compiled file and after a Load
// from the cache; an index that names another source's compiled file, a
// corrupt one, or a source changed behind its unchanged size and
// modification time gets the tokenizer of the bytes the source holds, and
// the index is written again.
func TestCompiledIndex(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("FERRY_TOKENIZER_CACHE", cache)
	dir := writeTiny(t)
	src := filepath.Join(dir, "tokenizer.json")
	// other is tiny with the ids of "th" and "the" swapped: as many bytes,
	// other ids.
	otherJSON := tinyJSON()
	vocab := otherJSON["model"].(map[string]any)["vocab"].(map[string]any)
	vocab["th"], vocab["the"] = 257, 256
	tinyRaw, otherRaw := marshal(t, tinyJSON()), marshal(t, otherJSON)
	if len(tinyRaw) != len(otherRaw) {
		t.Fatalf("the two sources are of %d and %d bytes", len(tinyRaw), len(otherRaw))
	}
	otherDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(otherDir, "tokenizer.json"), otherRaw, 0o644); err != nil {
		t.Fatal(err)
	}
	tinyKey, otherKey := sourceKey(tinyRaw), sourceKey(otherRaw)
	const text = "the the"
	tinyIDs, otherIDs := []int32{257, 258}, []int32{256, 258}
	check := func(step string, path string, wantCompiled bool, wantKey [32]byte, wantIDs []int32) {
		t.Helper()
		tok, err := Load(path)
		if err != nil || tok.compiled != wantCompiled {
			t.Fatalf("%s: %v, compiled %v, want %v", step, err, tok != nil && tok.compiled, wantCompiled)
		}
		if got := tok.Encode(text, false); !slices.Equal(got, wantIDs) {
			t.Fatalf("%s: %q is %v, want %v", step, text, got, wantIDs)
		}
		st, err := os.Stat(filepath.Join(path, "tokenizer.json"))
		if err != nil {
			t.Fatal(err)
		}
		if key, ok := readIndex(cache, filepath.Join(path, "tokenizer.json"), st); !ok || key != wantKey {
			t.Fatalf("%s: the index names %x (%v), want %x", step, key, ok, wantKey)
		}
	}
	check("first Load", dir, false, tinyKey, tinyIDs)
	check("second Load", dir, true, tinyKey, tinyIDs)
	check("the other source", otherDir, false, otherKey, otherIDs)
	st, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	// The index names the other source's file, which checks out.
	writeIndex(cache, src, st, otherKey)
	check("an index of another key", dir, true, tinyKey, tinyIDs)
	// Corrupt indexes.
	index := indexPath(cache, src)
	good, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range [][]byte{nil, good[:len(good)-1], append(slices.Clone(good), 0), append([]byte("X"), good[1:]...)} {
		if err := os.WriteFile(index, b, 0o644); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("corrupt index %d", i+1), dir, true, tinyKey, tinyIDs)
	}
	// The source changes behind its size and modification time: the index
	// names the old key, the new bytes have no compiled file yet.
	if err := os.WriteFile(src, otherRaw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(src, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if st2, err := os.Stat(src); err != nil || st2.Size() != st.Size() || !st2.ModTime().Equal(st.ModTime()) {
		t.Fatalf("the rewritten source's stat: %v", err)
	}
	if key, ok := readIndex(cache, src, st); !ok || key != tinyKey {
		t.Fatalf("the index before the change names %x (%v)", key, ok)
	}
	check("a changed source", dir, true, otherKey, otherIDs) // the other's file is there
	os.Remove(filepath.Join(cache, compiledName(otherKey)))
	if err := os.WriteFile(src, tinyRaw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(src, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	writeIndex(cache, src, st, otherKey) // names a file that is gone
	check("an index of a missing file", dir, true, tinyKey, tinyIDs)
	// An index of another size or time is not read.
	if _, ok := readIndex(cache, src, fakeStat{st, st.Size() + 1, st.ModTime()}); ok {
		t.Fatal("an index read for another size")
	}
	if _, ok := readIndex(cache, src, fakeStat{st, st.Size(), st.ModTime().Add(time.Nanosecond)}); ok {
		t.Fatal("an index read for another modification time")
	}
}

// fakeStat is a FileInfo of another size and modification time.
type fakeStat struct {
	fs.FileInfo
	size int64
	mod  time.Time
}

func (f fakeStat) Size() int64        { return f.size }
func (f fakeStat) ModTime() time.Time { return f.mod }

// TestCompiledRefusedUnmapped: a compiled file refused for its body's
// checksum leaves nothing reading its mapping, which Load unmaps then: the
// tables' upgrade (upgradeTables, which reads the mapped tables) once
// started before the checksum was known, and faulted after the unmap.
func TestCompiledRefusedUnmapped(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("FERRY_TOKENIZER_CACHE", cache)
	if _, err := Load(filepath.Join(fixtures, "qwen2.5")); err != nil { // writes the cache
		t.Fatal(err)
	}
	b, err := os.ReadFile(compiledFile(t, cache))
	if err != nil {
		t.Fatal(err)
	}
	b[88] ^= 1 // the body's checksum: the body reads, its sum does not match
	binary.LittleEndian.PutUint32(b[92:], crc32.Checksum(b[:92], castagnoli))
	path := filepath.Join(t.TempDir(), "refused.ferrytok")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var src [32]byte
	copy(src[:], b[16:48])
	for range 3 {
		m, mapped, err := le.ReadFile(path, maxCompiledSize)
		if err != nil {
			t.Fatal(err)
		}
		if tok, err := readCompiled(m, src, path); err == nil || !strings.Contains(err.Error(), "body checksum") {
			t.Fatalf("readCompiled of a body with a wrong checksum: %v, %v", tok != nil, err)
		}
		if mapped {
			if err := le.Unmap(m); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond) // a goroutine still reading m faults here
	}
}

func TestCompiledCorrupt(t *testing.T) {
	src := writeTiny(t)
	cache := t.TempDir()
	t.Setenv("FERRY_TOKENIZER_CACHE", cache)
	want, err := Load(src)
	if err != nil || want.compiled {
		t.Fatalf("first Load: %v, compiled %v", err, want != nil && want.compiled)
	}
	file := compiledFile(t, cache)
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	key := sourceKey(raw)
	if tok, err := readCompiled(good, key, file); err != nil || !tok.compiled {
		t.Fatalf("the file Load wrote does not read: %v", err)
	}
	le := binary.LittleEndian
	tests := []struct {
		name string
		mess func(b []byte) []byte
		want string // in the error
	}{
		{"empty", func(b []byte) []byte { return nil }, "shorter than"},
		{"truncated header", func(b []byte) []byte { return b[:50] }, "shorter than"},
		{"truncated body", func(b []byte) []byte { return b[:len(b)-1] }, "body of"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return refix(b) }, "magic"},
		{"header bit", func(b []byte) []byte { b[9] ^= 1; return b }, "header checksum"},
		{"version", func(b []byte) []byte { le.PutUint32(b[8:], compiledVersion+1); return refix(b) }, "version"},
		{"stale", func(b []byte) []byte { b[20] ^= 1; return refix(b) }, "stale"},
		{"body bit", func(b []byte) []byte { b[len(b)/2] ^= 0x10; return b }, "body checksum"},
		{"long body", func(b []byte) []byte { return refix(append(b, make([]byte, 8)...)) }, "after the last section"},
		{"odd length", func(b []byte) []byte { return refix(append(b, 0)) }, "after the last section"},
		{"section length", func(b []byte) []byte { le.PutUint64(b[compiledHeader:], 1<<40); return refix(b) }, "rest: section of"},
		{"rest JSON", func(b []byte) []byte { b[compiledHeader+8] = '['; return refix(b) }, "rest"},
		{"ids", func(b []byte) []byte {
			le.PutUint32(b[sectionOffset(t, b, 1)+4:], 1<<30) // scalars: nIDs
			return refix(b)
		}, "scalars"},
		{"unk", func(b []byte) []byte {
			le.PutUint32(b[sectionOffset(t, b, 1)+8:], 1<<20) // scalars: unkID
			return refix(b)
		}, "scalars"},
		{"ends", func(b []byte) []byte {
			le.PutUint32(b[sectionOffset(t, b, 2)+8:], 1<<20) // tokEnds[2]: past the arena, then down
			return refix(b)
		}, "tokEnds: not ascending"},
		{"arena", func(b []byte) []byte {
			off := sectionOffset(t, b, 4) // keyEnds: the last one
			n := int(le.Uint64(b[off-8:]))
			le.PutUint32(b[off+n-4:], le.Uint32(b[off+n-4:])+1)
			return refix(b)
		}, "keys:"},
		{"id flags", func(b []byte) []byte {
			b[sectionOffset(t, b, 6)] = 8
			return refix(b)
		}, "idFlags"},
		{"vocab slot", func(b []byte) []byte {
			off := sectionOffset(t, b, 7) // vocabSlots
			for i := off; ; i += 8 {
				if le.Uint64(b[i:]) != 0 { // the first filled slot: its id out of range
					le.PutUint32(b[i:], 1<<20)
					break
				}
			}
			return refix(b)
		}, "vocabSlots"},
		{"byte id", func(b []byte) []byte {
			le.PutUint32(b[sectionOffset(t, b, 8)+4*'a':], 1<<20)
			return refix(b)
		}, "byte 97"},
		{"merge slot", func(b []byte) []byte {
			off := sectionOffset(t, b, 10) // mergeSlots
			idBits := le.Uint32(b[sectionOffset(t, b, 1)+28:]) & 0xff
			for i := off; ; i += 8 {
				if s := le.Uint64(b[i:]); s != 0 { // the first filled slot: its val out of range
					le.PutUint64(b[i:], s|(1<<(63-2*idBits)-1))
					break
				}
			}
			return refix(b)
		}, "mergeSlots"},
		{"merge ids", func(b []byte) []byte {
			le.PutUint32(b[sectionOffset(t, b, 1)+28:], 30) // scalars: the merge table's ids of 30 bits
			return refix(b)
		}, "mergeSlots: ids of 30 bits"},
		{"full merge table", func(b []byte) []byte {
			off := sectionOffset(t, b, 10)
			n := int(le.Uint64(b[off-8:]))
			var filled uint64
			for i := off; filled == 0; i += 8 {
				filled = le.Uint64(b[i:])
			}
			for i := off; i < off+n; i += 8 {
				if le.Uint64(b[i:]) == 0 {
					le.PutUint64(b[i:], filled)
				}
			}
			return refix(b)
		}, "0 empty slots; ids and orders valid: true"},
		{"byte pairs", func(b []byte) []byte {
			off := sectionOffset(t, b, 12)
			le.PutUint64(b[off:], 1<<20)
			return refix(b)
		}, "bytePairs"},
		{"word length", func(b []byte) []byte {
			off := sectionOffset(t, b, 13) // wordSlots
			for i := off + 8; ; i += 16 {
				if le.Uint64(b[i:]) != 0 { // the first filled slot: a key of 13 bytes
					b[i+4] = shortWord + 2
					break
				}
			}
			return refix(b)
		}, "wordSlots"},
		{"word id", func(b []byte) []byte {
			off := sectionOffset(t, b, 13)
			for i := off + 8; ; i += 16 {
				if le.Uint64(b[i:]) != 0 {
					b[i+7] |= 0x10 // id 1<<20 at least
					break
				}
			}
			return refix(b)
		}, "wordSlots"},
		{"full word table", func(b []byte) []byte {
			off := sectionOffset(t, b, 13)
			n := int(le.Uint64(b[off-8:]))
			for i := off + 8; i < off+n; i += 16 {
				if le.Uint64(b[i:]) == 0 {
					le.PutUint64(b[i:], 3<<32|1<<40)
				}
			}
			return refix(b)
		}, "wordSlots"},
		{"long word length", func(b []byte) []byte {
			off := sectionOffset(t, b, 14) // wordLong: a key of 12 bytes
			le.PutUint64(b[off+16:], shortWord+1|1<<32)
			return refix(b)
		}, "wordLong"},
		{"long word id", func(b []byte) []byte {
			off := sectionOffset(t, b, 14)
			le.PutUint64(b[off+16:], shortWord+2|1<<52)
			return refix(b)
		}, "wordLong"},
		{"full long word table", func(b []byte) []byte {
			off := sectionOffset(t, b, 14)
			n := int(le.Uint64(b[off-8:]))
			for i := off + 16; i < off+n; i += 24 {
				le.PutUint64(b[i:], shortWord+2|1<<32)
			}
			return refix(b)
		}, "wordLong"},
		{"long word slots", func(b []byte) []byte {
			off := sectionOffset(t, b, 14)
			n := int(le.Uint64(b[off-8:]))
			le.PutUint64(b[off-8:], uint64(n-24)) // 15 slots
			return refix(append(b[:off+n-24], b[off+n:]...))
		}, "and 15 slots, want powers of two"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mess(append([]byte(nil), good...))
			_, err := readCompiled(b, key, file)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("readCompiled: %v, want ErrCorrupt with %q", err, tc.want)
			}
			// Load does not use it: it parses, then writes the file again.
			if err := os.WriteFile(file, b, 0o644); err != nil {
				t.Fatal(err)
			}
			for i, wantCompiled := range []bool{false, true} {
				tok, err := Load(src)
				if err != nil {
					t.Fatal(err)
				}
				if tok.compiled != wantCompiled {
					t.Fatalf("Load %d: compiled %v, want %v", i+1, tok.compiled, wantCompiled)
				}
				tok.compiled = false
				if !sameTokenizer(tok, want) {
					t.Fatalf("Load %d: the tokenizer differs", i+1)
				}
			}
			compiledFile(t, cache) // no temporary file left behind
		})
	}
}

// sectionOffset returns where the bytes of body section i (0 = rest) of a
// compiled file start.
func sectionOffset(t *testing.T, b []byte, i int) int {
	t.Helper()
	off := compiledHeader
	for ; i > 0; i-- {
		off += 8 + (int(binary.LittleEndian.Uint64(b[off:]))+7)&^7
	}
	return off + 8
}

// TestCompiledCacheDir: a cache directory that cannot be made, or a
// cache that is off, leaves Load to parse; a missing one is made.
func TestCompiledCacheDir(t *testing.T) {
	src := writeTiny(t)
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(blocker, "cache"), "off"} {
		t.Setenv("FERRY_TOKENIZER_CACHE", dir)
		for range 2 {
			tok, err := Load(src)
			if err != nil || tok.compiled {
				t.Fatalf("cache %s: %v, compiled %v", dir, err, tok != nil && tok.compiled)
			}
		}
	}
	missing := filepath.Join(t.TempDir(), "a", "b")
	t.Setenv("FERRY_TOKENIZER_CACHE", missing)
	for i, want := range []bool{false, true} {
		tok, err := Load(src)
		if err != nil || tok.compiled != want {
			t.Fatalf("Load %d into a missing directory: %v, compiled %v", i+1, err, tok != nil && tok.compiled)
		}
	}
	compiledFile(t, missing)
	// A source that does not parse writes nothing.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "tokenizer.json"), []byte(`{"model": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := t.TempDir()
	t.Setenv("FERRY_TOKENIZER_CACHE", empty)
	if _, err := Load(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load of a bad file: %v, want ErrCorrupt", err)
	}
	if m, _ := filepath.Glob(filepath.Join(empty, "*")); len(m) != 0 {
		t.Fatalf("a bad file left %q in the cache", m)
	}
}

// TestHashSource: the key of a file read through the buffer is that of
// its bytes.
func TestHashSource(t *testing.T) {
	for _, path := range []string{filepath.Join(writeTiny(t), "tokenizer.json"), filepath.Join(fixtures, "qwen2.5", "tokenizer.json.zst")} {
		raw, err := readSource(path)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := hashSource(path); err != nil || got != sourceKey(raw) {
			t.Errorf("%s: %x, %v; want %x", path, got, err, sourceKey(raw))
		}
	}
	if _, err := hashSource(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Errorf("a missing file hashed")
	}
}

func TestCacheDirDefault(t *testing.T) {
	t.Setenv("FERRY_TOKENIZER_CACHE", "")
	t.Setenv("FERRY_CACHE", "/c")
	if got := cacheDir(); got != filepath.Join("/c", "tokenize") {
		t.Errorf("FERRY_CACHE=/c: %q", got)
	}
	t.Setenv("FERRY_CACHE", "")
	t.Setenv("HOME", "/h")
	if got := cacheDir(); got != filepath.Join("/h", ".cache", "ferry", "tokenize") {
		t.Errorf("HOME=/h: %q", got)
	}
}

// FuzzCompiled feeds mutated compiled files, their checksums made valid, to
// readCompiled: errors are fine; panics are not; what reads must encode and
// decode.
func FuzzCompiled(f *testing.F) {
	var key [32]byte
	for _, m := range []map[string]any{tinyJSON(), func() map[string]any {
		m := tinyJSON()
		m["model"].(map[string]any)["unk_token"] = "!"
		m["model"].(map[string]any)["ignore_merges"] = true
		return m
	}()} {
		t, mt, rest, err := parseTables(marshal(f, m), true)
		if err != nil || mt == nil {
			f.Fatal(err)
		}
		f.Add(appendCompiled(nil, key, t.sha, rest, mt))
	}
	// A character-level (SentencePiece-style) one.
	sp := `{"model": {"type": "BPE", "vocab": {"<unk>": 0, "▁": 1, "a": 2, "▁a": 3, "<0x41>": 4}, "merges": ["▁ a"], "unk_token": "<unk>", "byte_fallback": true},` +
		` "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}}`
	t, mt, rest, err := parseTables([]byte(sp), true)
	if err != nil || mt == nil {
		f.Fatal(err)
	}
	f.Add(appendCompiled(nil, key, t.sha, rest, mt))
	f.Fuzz(func(t *testing.T, b []byte) {
		b = refix(b)
		if len(b) >= 48 {
			copy(key[:], b[16:48])
		}
		tok, err := readCompiled(b, key, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrUnsupported", err)
			}
			return
		}
		for _, s := range []string{"the the<x><s>", "a\xff b  \n\n 123 ſ A", ""} {
			ids := tok.Encode(s, true)
			_ = tok.Decode(ids, false)
			_ = tok.Decode(ids, true)
		}
		_, _ = tok.TokenID("the")
		_ = tok.Decode([]int32{-1, 0, 1 << 30}, false)
	})
}

// TestCompiledRemovesStale: writing an entry removes the same source's
// files of older versions and crashed writers' old temporary files, and
// leaves a newer version's file, a fresh temporary file and other sources'
// files.
func TestCompiledRemovesStale(t *testing.T) {
	src := writeTiny(t)
	raw, err := os.ReadFile(filepath.Join(src, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	hexKey := hex.EncodeToString(func() []byte { k := sourceKey(raw); return k[:] }())
	other := strings.Repeat("ab", 32)
	dir := t.TempDir()
	t.Setenv("FERRY_TOKENIZER_CACHE", dir)
	name := func(key string, v int) string { return fmt.Sprintf("%s.v%d.ferrytok", key, v) }
	old := time.Now().Add(-2 * staleTemp)
	gone := []string{name(hexKey, 1), name(hexKey, compiledVersion-1), name(hexKey, 2) + ".tmp-123"}
	kept := []string{name(hexKey, compiledVersion+1), name(hexKey, compiledVersion) + ".tmp-456", name(other, 1), name(other, 1) + ".tmp-789", hexKey + ".vx.ferrytok"}
	for _, f := range append(append([]string{}, gone...), kept...) {
		p := filepath.Join(dir, f)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if f != name(hexKey, compiledVersion)+".tmp-456" {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := Load(src); err != nil {
		t.Fatal(err)
	}
	for _, f := range gone {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", f, err)
		}
	}
	for _, f := range append(kept, name(hexKey, compiledVersion)) {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s: %v, want it kept", f, err)
		}
	}
	if tok, err := Load(src); err != nil || !tok.compiled {
		t.Fatalf("second Load: %v, compiled %v", err, tok != nil && tok.compiled)
	}
}

// TestUpgradeTables: a tokenizer read from the compiled cache encodes the
// same while upgradeTables copies its words and merges into huge pages
// (two goroutines encode from the moment Load returns; the race detector
// runs this in make test) and after, when the copies are what it reads.
func TestUpgradeTables(t *testing.T) {
	texts := corpusTexts(t)[:corpusStep(400, 100)]
	for _, m := range models {
		want := loadModel(t, m)
		t.Setenv("FERRY_TOKENIZER_CACHE", t.TempDir())
		if _, err := Load(filepath.Join(fixtures, m)); err != nil { // writes the cache
			t.Fatal(err)
		}
		tok, err := Load(filepath.Join(fixtures, m))
		if err != nil || !tok.compiled {
			t.Fatalf("%s: Load: %v, compiled %v", m, err, tok != nil && tok.compiled)
		}
		var wg sync.WaitGroup
		for g := range 2 {
			wg.Go(func() {
				for i := g; i < len(texts); i += 2 {
					if got, w := tok.Encode(texts[i], true), want.Encode(texts[i], true); !slices.Equal(got, w) {
						t.Errorf("%s: text %d during the upgrade: %d ids differ from %d", m, i, len(got), len(w))
						return
					}
				}
			})
		}
		wg.Wait()
		tok.model.upgrading.Wait()
		ft := tok.model.tables()
		_, huge := le.HugeCopy(make([]uint64, 1<<18)) // 2 MiB: nil where there are no huge pages
		if (ft.words.mem != nil) != (huge != nil) || (ft.merges.mem != nil) != (huge != nil) {
			t.Fatalf("%s: huge pages here %v; the words in them %v, the merges %v", m, huge != nil, ft.words.mem != nil, ft.merges.mem != nil)
		}
		if !slices.Equal(ft.words.slots, tok.model.words.slots) || !slices.Equal(ft.merges.slots, tok.model.merges.slots) {
			t.Fatalf("%s: the copies differ from the tables", m)
		}
		for i, s := range texts {
			if got, w := tok.Encode(s, true), want.Encode(s, true); !slices.Equal(got, w) {
				t.Fatalf("%s: text %d after the upgrade: %d ids differ from %d", m, i, len(got), len(w))
			}
		}
	}
}

// TestReadMergesSide: readMerges takes a table whose merged ids are aside
// (ranks and merged ids in different orders) and refuses one with a merged
// id aside out of range.
func TestReadMergesSide(t *testing.T) {
	kvs := []mergeKV{{pairKey(1, 2), 9}, {pairKey(3, 4), 5}, {pairKey(9, 5), 7}}
	mt, err := newMergeTable(kvs, 9)
	if err != nil || mt.side == nil {
		t.Fatalf("newMergeTable: %v, side %v", err, mt.side)
	}
	var ms, side []byte
	for _, s := range mt.slots {
		ms = binary.LittleEndian.AppendUint64(ms, s)
	}
	for _, id := range mt.side {
		side = binary.LittleEndian.AppendUint32(side, id)
	}
	params := uint32(mt.idBits) | uint32(mt.placeBits)<<8
	var got modelTables
	if err := got.readMerges(ms, side, nil, uint32(mt.shift), params, 10, "x", 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	checkMergeTable(t, "read", &got.merges, kvs, []uint64{pairKey(2, 1), pairKey(5, 9)})
	binary.LittleEndian.PutUint32(side[4:], 10) // a merged id of 10 ids
	if err := got.readMerges(ms, side, nil, uint32(mt.shift), params, 10, "x", 0, 0, 0); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "mergeSide") {
		t.Fatalf("a merged id out of range: %v", err)
	}
}
