package serve_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/ferryml/ferry/serve"
)

// Example serves a dataprep output on a socket and reads one batch through
// the Go client: row 0 of shards 0 and 1.
func Example() {
	data := os.Getenv("FERRY_EXAMPLE_DATA") // a dataprep output directory
	if data == "" {
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	srv, err := serve.NewServer(ctx, serve.Config{Data: data})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	sock := filepath.Join(os.TempDir(), "ferry-example.sock")
	ln, err := serve.Listen(sock)
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(ctx, ln)

	c, err := serve.Dial(ctx, sock, serve.Hello{Slots: 2, MaxRows: 2, Rank: 0, Worker: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// One batch: row 0 of shard 0, then row 0 of shard 1.
	runs := []serve.Run{{File: 0, Row: 0, Rows: 1, Flags: serve.RunContinues}, {File: 1, Row: 0, Rows: 1}}
	if err := c.Plan(runs); err != nil {
		log.Fatal(err)
	}
	slot, h, err := c.Wait()
	if err != nil {
		log.Fatal(err)
	}
	ids := c.Column(c.Slot(slot), serve.ColInputIDs, int(h.Rows))
	fmt.Println(h.Rows, "rows,", len(ids), "bytes of input_ids")
	c.Release(1)
}
