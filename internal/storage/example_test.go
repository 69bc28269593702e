package storage_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ferryml/ferry/internal/storage"
)

// The all-or-nothing write idiom: nothing appears at the target unless
// Commit succeeds; the deferred Abort cleans up on every other path.
func ExampleCreate() {
	dir, _ := os.MkdirTemp("", "storage-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	write := func(loc, text string) (err error) {
		w, err := storage.Create(ctx, loc)
		if err != nil {
			return err
		}
		defer w.Abort()
		if _, err := io.WriteString(w, text); err != nil {
			return err
		}
		return w.Commit()
	}
	loc := storage.Join(dir, "manifest.json")
	fmt.Println(write(loc, `{"ranks": 8}`))
	err := write(loc, `{"ranks": 16}`) // exists: WithOverwrite(true) would replace it
	fmt.Println(err != nil)

	s, size, _ := storage.OpenStream(ctx, loc)
	defer s.Close()
	b, _ := io.ReadAll(s)
	fmt.Println(size, string(b))
	fmt.Println(storage.Join("s3://bucket/run-1", "shards", "rank-00000.arrow"))
	fmt.Println(filepath.Base(loc))
	// Output:
	// <nil>
	// true
	// 12 {"ranks": 8}
	// s3://bucket/run-1/shards/rank-00000.arrow
	// manifest.json
}
