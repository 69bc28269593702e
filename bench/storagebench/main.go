// Command storagebench measures one side of a storage benchmark and prints
// one JSON line at the end:
//
//	{"bench":{"side":"ferry","op":"upload","bytes":536870912,"seconds":1.9,"mb_per_s":282.1,"peak_rss_mb":95.3}}
//
// S3 (a versitygw on 127.0.0.1 that it starts, or -endpoint with the AWS_*
// credentials of the environment):
//
//	storagebench -side ferry -op upload   -size 512MiB   # storage.Create + Commit (multipart, parallel parts)
//	storagebench -side minio -op upload   -size 512MiB   # one minio-go PutObject, defaults
//	storagebench -side ferry -op download -size 512MiB   # storage.OpenStream (parallel ranged read-ahead)
//	storagebench -side minio -op download -size 512MiB   # one minio-go GetObject, defaults
//
// Local (a file of -size random bytes in -dir is copied to a new file):
//
//	storagebench -side ferry   -op copy -size 512MiB -dir /tmp   # OpenStream -> Create -> Commit (fsync + rename)
//	storagebench -side cp      -op copy -size 512MiB -dir /tmp   # cp src dst
//	storagebench -side cp-sync -op copy -size 512MiB -dir /tmp   # cp src dst && sync dst (durable, as ferry is)
//
// Upload sources are generated on the fly (a plain io.Reader, as a
// command streaming its output has), so that memory is the uploader's own.
// Run sides as separate processes, alternating, so peak RSS is per side.
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/procstat"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/internal/testutil/s3server"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "storagebench:", err)
		os.Exit(1)
	}
}

type result struct {
	Side      string  `json:"side"`
	Op        string  `json:"op"`
	Bytes     int64   `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	MBPerS    float64 `json:"mb_per_s"`
	PeakRSSMB float64 `json:"peak_rss_mb"`
	PartSize  int64   `json:"part_size,omitempty"`
	Parallel  int     `json:"parallelism,omitempty"`
}

func run() error {
	side := flag.String("side", "ferry", "ferry | minio (S3), ferry | cp | cp-sync (local copy)")
	op := flag.String("op", "upload", "upload | download (S3), copy (local)")
	sizeFlag := flag.String("size", "512MiB", "bytes to move (suffixes KiB, MiB, GiB)")
	endpoint := flag.String("endpoint", "", "S3 endpoint URL; default: start versitygw on 127.0.0.1 (credentials then come from AWS_*)")
	bucket := flag.String("bucket", "ferry-bench", "S3 bucket (created when the benchmark starts its own server)")
	dir := flag.String("dir", os.TempDir(), "directory for local files and the versitygw data")
	partSize := flag.Int64("part-size", 0, "ferry: part size of uploads and ranged reads (default: storage's, 16 MiB up, 8 MiB down)")
	par := flag.Int("parallelism", storage.DefaultParallelism, "ferry: parts in flight")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the timed part to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	size, err := parseSize(*sizeFlag)
	if err != nil {
		return err
	}
	ctx, stop := cli.SignalContext(context.Background())
	defer stop()

	res := result{Side: *side, Op: *op, Bytes: size}
	var elapsed time.Duration
	switch *op {
	case "copy":
		elapsed, err = localCopy(ctx, *side, *dir, size)
	case "upload", "download":
		res.PartSize, res.Parallel = *partSize, *par
		elapsed, err = s3Bench(ctx, *side, *op, *endpoint, *bucket, *dir, size, *partSize, *par)
	default:
		return fmt.Errorf("unknown -op %q", *op)
	}
	if err != nil {
		return err
	}
	res.Seconds = elapsed.Seconds()
	res.MBPerS = float64(size) / 1e6 / res.Seconds
	res.PeakRSSMB = float64(procstat.PeakRSS()) / 1e6
	return json.NewEncoder(os.Stdout).Encode(map[string]any{"bench": res})
}

func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad -size %q", s)
	}
	return n * mult, nil
}

// genReader yields size pseudo-random bytes without holding them: a 1 MiB
// random block, each copy stamped with its index so no two MiB are equal.
type genReader struct {
	block []byte
	off   int64
	size  int64
}

func newGen(size int64) *genReader {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, 1<<20)
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return &genReader{block: b, size: size}
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.off >= g.size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && g.off < g.size {
		i := g.off % int64(len(g.block))
		k := copy(p[n:], g.block[i:min(int64(len(g.block)), i+g.size-g.off)])
		if i == 0 && k >= 8 {
			binary.LittleEndian.PutUint64(p[n:], uint64(g.off>>20))
		}
		n += k
		g.off += int64(k)
	}
	return n, nil
}

func localCopy(ctx context.Context, side, dir string, size int64) (time.Duration, error) {
	work, err := os.MkdirTemp(dir, "storagebench-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(work)
	src, dst := filepath.Join(work, "src"), filepath.Join(work, "dst")
	f, err := os.Create(src)
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if _, err := io.Copy(bw, newGen(size)); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	start := time.Now()
	switch side {
	case "ferry":
		s, _, err := storage.OpenStream(ctx, src)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		w, err := storage.Create(ctx, dst)
		if err != nil {
			return 0, err
		}
		defer w.Abort()
		if _, err := io.Copy(w, s); err != nil {
			return 0, err
		}
		if err := w.Commit(); err != nil {
			return 0, err
		}
	case "cp", "cp-sync":
		if out, err := exec.CommandContext(ctx, "cp", src, dst).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("cp: %v: %s", err, out)
		}
		if side == "cp-sync" {
			if out, err := exec.CommandContext(ctx, "sync", dst).CombinedOutput(); err != nil {
				return 0, fmt.Errorf("sync: %v: %s", err, out)
			}
		}
	default:
		return 0, fmt.Errorf("unknown -side %q for -op copy (want ferry, cp or cp-sync)", side)
	}
	elapsed := time.Since(start)
	if st, err := os.Stat(dst); err != nil || st.Size() != size {
		return 0, fmt.Errorf("copy produced %v, %v; want %d bytes", st, err, size)
	}
	return elapsed, nil
}

func s3Bench(ctx context.Context, side, op, endpoint, bucket, dir string, size, partSize int64, par int) (time.Duration, error) {
	var mc *minio.Client
	var err error
	if endpoint == "" {
		data, err := os.MkdirTemp(dir, "storagebench-s3-")
		if err != nil {
			return 0, err
		}
		defer os.RemoveAll(data)
		srv, err := s3server.Launch(data)
		if err != nil {
			return 0, err
		}
		defer srv.Kill()
		for _, kv := range srv.Env() {
			k, v, _ := strings.Cut(kv, "=")
			os.Setenv(k, v)
		}
		if mc, err = srv.NewClient(); err != nil {
			return 0, err
		}
		if err := mc.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
			return 0, err
		}
	} else {
		host := strings.TrimPrefix(strings.TrimPrefix(endpoint, "http://"), "https://")
		mc, err = minio.New(host, &minio.Options{
			Creds:        credentials.NewEnvAWS(),
			Secure:       strings.HasPrefix(endpoint, "https://"),
			Region:       os.Getenv("AWS_REGION"),
			BucketLookup: minio.BucketLookupPath,
		})
		if err != nil {
			return 0, err
		}
		os.Setenv("AWS_ENDPOINT_URL", endpoint)
	}
	key := fmt.Sprintf("bench/%s-%d", op, time.Now().UnixNano())
	loc := "s3://" + bucket + "/" + key
	defer mc.RemoveObject(context.WithoutCancel(ctx), bucket, key, minio.RemoveObjectOptions{})
	opts := []storage.Option{storage.WithParallelism(par)}
	if partSize > 0 {
		opts = append(opts, storage.WithPartSize(partSize))
	}

	if op == "download" { // the object to read, written untimed
		if _, err := mc.PutObject(ctx, bucket, key, newGen(size), size, minio.PutObjectOptions{}); err != nil {
			return 0, fmt.Errorf("prepare %s: %w", loc, err)
		}
	}
	start := time.Now()
	var n int64
	switch side + " " + op {
	case "ferry upload":
		w, err := storage.Create(ctx, loc, opts...)
		if err != nil {
			return 0, err
		}
		defer w.Abort()
		if n, err = io.Copy(w, newGen(size)); err != nil {
			return 0, err
		}
		if err := w.Commit(); err != nil {
			return 0, err
		}
	case "minio upload":
		info, err := mc.PutObject(ctx, bucket, key, newGen(size), size, minio.PutObjectOptions{})
		if err != nil {
			return 0, err
		}
		n = info.Size
	case "ferry download":
		s, _, err := storage.OpenStream(ctx, loc, opts...)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		if n, err = io.Copy(io.Discard, s); err != nil {
			return 0, err
		}
	case "minio download":
		o, err := mc.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		if err != nil {
			return 0, err
		}
		defer o.Close()
		if n, err = io.Copy(io.Discard, o); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("unknown -side %q (want ferry or minio)", side)
	}
	elapsed := time.Since(start)
	if n != size {
		return 0, fmt.Errorf("%s %s moved %d bytes, want %d", side, op, n, size)
	}
	if op == "upload" {
		st, err := mc.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
		if err != nil || st.Size != size {
			return 0, errors.Join(fmt.Errorf("uploaded object has %d bytes, want %d", st.Size, size), err)
		}
	}
	return elapsed, nil
}
