// Package synthckpt writes synthetic sharded checkpoints of any size for
// tests: the safetensors shards with DCP_SHARDING_INFO that torch's
// HuggingFaceStorageWriter writes, one per rank, with random F32 values.
package synthckpt

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// HFShards writes ranks shards into dir holding nt tensors
// "model.layers.<i>.w" of shape [rows, cols] (F32), each split along
// dimension 0 into ranks equal chunks, and returns the tensor bytes.
// The values come from a fixed seed.
func HFShards(t testing.TB, dir string, nt, rows, cols, ranks int) int64 {
	t.Helper()
	rng := rand.New(rand.NewSource(1))
	per := rows / ranks
	for r := 0; r < ranks; r++ {
		info := map[string]map[string][]int{}
		var entries []string
		var off int
		for i := 0; i < nt; i++ {
			name := fmt.Sprintf("model.layers.%d.w", i)
			info[name] = map[string][]int{"saved_offsets": {r * per, 0}}
			n := per * cols * 4
			entries = append(entries, fmt.Sprintf(`%q:{"dtype":"F32","shape":[%d,%d],"data_offsets":[%d,%d]}`, name, per, cols, off, off+n))
			off += n
		}
		ib, _ := json.Marshal(info)
		mb, _ := json.Marshal(map[string]string{"DCP_SHARDING_INFO": string(ib), "format": "pt"})
		h := `{"__metadata__":` + string(mb) + "," + strings.Join(entries, ",") + "}"
		for len(h)%8 != 0 {
			h += " "
		}
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("shard-%05d-model-00001-of-00001.safetensors", r+1)))
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriterSize(f, 1<<20)
		binary.Write(w, binary.LittleEndian, uint64(len(h)))
		w.WriteString(h)
		buf := make([]byte, 1<<20)
		for left := off; left > 0; left -= len(buf) {
			b := buf[:min(left, len(buf))]
			rng.Read(b)
			w.Write(b)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return int64(nt * rows * cols * 4)
}
