package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/s3server"
	"github.com/minio/minio-go/v7"
)

const testPart = MinPartSize // 5 MiB: small parts keep the tests quick

// startS3 starts versitygw, points the AWS_* environment at it and
// creates a bucket.
func startS3(t *testing.T) (*s3server.Server, string) {
	t.Helper()
	srv := s3server.Start(t)
	srv.SetEnv(t)
	return srv, srv.Bucket(t, "ferry-test")
}

// pendingUploads lists the multipart uploads left in the bucket.
func pendingUploads(t *testing.T, srv *s3server.Server, bucket string) []string {
	t.Helper()
	c := srv.Client(t)
	res, err := minio.Core{Client: c}.ListMultipartUploads(context.Background(), strings.TrimPrefix(bucket, "s3://"), "", "", "", "", 1000)
	if err != nil {
		t.Fatalf("list multipart uploads: %v", err)
	}
	var out []string
	for _, u := range res.Uploads {
		out = append(out, u.Key+" "+u.UploadID)
	}
	return out
}

func readAllStream(t *testing.T, loc string, opts ...Option) []byte {
	t.Helper()
	s, n, err := OpenStream(context.Background(), loc, opts...)
	if err != nil {
		t.Fatalf("OpenStream %s: %v", loc, err)
	}
	defer s.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, s); err != nil {
		t.Fatalf("stream %s: %v", loc, err)
	}
	if int64(buf.Len()) != n {
		t.Fatalf("stream %s: %d bytes, size %d", loc, buf.Len(), n)
	}
	return buf.Bytes()
}

func TestS3RoundTrip(t *testing.T) {
	srv, bucket := startS3(t)
	ctx := context.Background()
	opts := []Option{WithPartSize(testPart), WithParallelism(3)}
	for _, tc := range []struct {
		name      string
		size      int
		multipart bool
	}{
		{"empty", 0, false},
		{"small", 1000, false},
		{"exactly one part", testPart, false},
		{"one part plus one byte", testPart + 1, true},
		{"exactly three parts", 3 * testPart, true},
		{"several parts", 4*testPart + 12345, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc := Join(bucket, "rt", strings.ReplaceAll(tc.name, " ", "-"))
			data := randBytes(tc.size, uint64(tc.size)+1)
			if err := writeAll(ctx, loc, data, 100*1024+7, opts...); err != nil {
				t.Fatal(err)
			}
			info, err := Stat(ctx, loc)
			if err != nil || info.Size != int64(tc.size) || info.Loc != loc {
				t.Fatalf("Stat = %+v, %v", info, err)
			}
			oi, err := srv.Client(t).StatObject(ctx, "ferry-test", strings.TrimPrefix(loc, bucket+"/"), minio.StatObjectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(oi.ETag, "-"); got != tc.multipart {
				t.Errorf("ETag %q: multipart = %v, want %v", oi.ETag, got, tc.multipart)
			}
			if got := readAllStream(t, loc, opts...); sha256.Sum256(got) != sha256.Sum256(data) {
				t.Fatalf("stream: content differs (%d bytes read)", len(got))
			}
			// The same bytes through io.Copy, which uses the writer's ReadFrom.
			w, err := Create(ctx, loc+".copy", opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Abort()
			if n, err := io.Copy(w, iotestHalfReader{bytes.NewReader(data)}); err != nil || n != int64(tc.size) {
				t.Fatalf("io.Copy = %d, %v", n, err)
			}
			if err := w.Commit(); err != nil {
				t.Fatal(err)
			}
			if got := readAllStream(t, loc+".copy", opts...); !bytes.Equal(got, data) {
				t.Fatalf("copy: content differs (%d bytes read)", len(got))
			}
			r, err := Open(ctx, loc, opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if r.Size() != int64(tc.size) {
				t.Fatalf("Size = %d", r.Size())
			}
			// Ranges that cross part boundaries, and one read large enough
			// to be split into parallel ranged GETs.
			for _, rg := range [][2]int{{0, 1}, {testPart - 10, 20}, {2*testPart - 1, 2}, {1, tc.size - 2}, {0, tc.size}} {
				off, n := rg[0], rg[1]
				if off < 0 || n <= 0 || off+n > tc.size {
					continue
				}
				buf := make([]byte, n)
				if k, err := r.ReadAt(buf, int64(off)); err != nil || k != n {
					t.Fatalf("ReadAt(%d, %d) = %d, %v", off, n, k, err)
				}
				if !bytes.Equal(buf, data[off:off+n]) {
					t.Fatalf("ReadAt(%d, %d): content differs", off, n)
				}
			}
			// Reads past the end give io.EOF, as io.ReaderAt requires.
			buf := make([]byte, 10)
			if k, err := r.ReadAt(buf, int64(tc.size)-3); tc.size >= 3 && (k != 3 || err != io.EOF) {
				t.Fatalf("ReadAt at end = %d, %v; want 3, EOF", k, err)
			}
		})
	}
	if up := pendingUploads(t, srv, bucket); len(up) != 0 {
		t.Fatalf("uploads left: %v", up)
	}
}

// TestS3Large writes one object of more than 64 MiB with the default part
// size, several parts in flight, and checks that memory stays bounded by
// part size x (parallelism + 1).
func TestS3Large(t *testing.T) {
	srv, bucket := startS3(t)
	ctx := context.Background()
	const size = 72<<20 + 4321
	data := randBytes(size, 99)
	loc := Join(bucket, "large.bin")
	w, err := Create(ctx, loc, WithParallelism(3))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	for off := 0; off < size; off += 3 << 20 {
		if _, err := w.Write(data[off:min(off+3<<20, size)]); err != nil {
			t.Fatal(err)
		}
	}
	sw := w.(*s3Writer)
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if sw.partNum != 5 {
		t.Errorf("%d parts, want 5", sw.partNum)
	}
	if sw.bufsMade > 3+1 {
		t.Errorf("%d part buffers allocated, want <= parallelism+1 = 4", sw.bufsMade)
	}
	if m := sw.maxInFlight.Load(); m < 2 || m > 3 {
		t.Errorf("at most %d parts were in flight at once, want 2..3", m)
	}
	want := sha256.Sum256(data)
	if got := readAllStream(t, loc, WithParallelism(3)); sha256.Sum256(got) != want {
		t.Fatal("stream: content differs")
	}
	r, err := Open(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got := make([]byte, size)
	if _, err := r.ReadAt(got, 0); err != nil || sha256.Sum256(got) != want {
		t.Fatalf("ReadAt of the whole object: %v", err)
	}
	if up := pendingUploads(t, srv, bucket); len(up) != 0 {
		t.Fatalf("uploads left: %v", up)
	}
}

func TestS3Faults(t *testing.T) {
	srv, bucket := startS3(t)
	ctx := context.Background()
	old := []byte("the previous complete object")
	target := Join(bucket, "faults", "target")
	if err := writeAll(ctx, target, old, 1<<20); err != nil {
		t.Fatal(err)
	}
	data := randBytes(4*testPart, 5)
	small := []Option{WithPartSize(testPart), WithParallelism(2), WithOverwrite(true)}
	const badSecret = "wrong-secret-do-not-print-0123456789"

	tests := []struct {
		name    string
		loc     string
		opts    []Option
		run     func(ctx context.Context, cancel context.CancelFunc, w Writer) error
		wantErr error
		noText  []string // must not appear in the error
	}{
		{
			name:    "exists without overwrite",
			loc:     target,
			wantErr: fs.ErrExist,
		},
		{
			name:    "missing bucket",
			loc:     "s3://no-such-bucket/x",
			wantErr: fs.ErrNotExist,
		},
		{
			name:    "wrong secret",
			loc:     target,
			opts:    append([]Option{WithS3Config(S3Config{AccessKeyID: srv.AccessKey, SecretAccessKey: badSecret, MaxRetries: 1})}, small...),
			wantErr: ErrAccessDenied,
			noText:  []string{badSecret, srv.SecretKey},
		},
		{
			name:    "unknown access key",
			loc:     target,
			opts:    append([]Option{WithS3Config(S3Config{AccessKeyID: "AKIAUNKNOWN", SecretAccessKey: badSecret, MaxRetries: 1})}, small...),
			wantErr: ErrAccessDenied,
			noText:  []string{badSecret, srv.SecretKey},
		},
		{
			name: "abort after parts were uploaded",
			loc:  target,
			opts: small,
			run: func(ctx context.Context, cancel context.CancelFunc, w Writer) error {
				if _, err := w.Write(data); err != nil {
					return err
				}
				w.Abort()
				return w.Commit()
			},
			wantErr: ErrAborted,
		},
		{
			name: "cancel mid write",
			loc:  target,
			opts: small,
			run: func(ctx context.Context, cancel context.CancelFunc, w Writer) error {
				if _, err := w.Write(data[:2*testPart+1]); err != nil {
					return err
				}
				cancel()
				if _, err := w.Write(data[2*testPart+1:]); err == nil {
					return errors.New("Write after cancel succeeded")
				}
				return w.Commit()
			},
			wantErr: context.Canceled,
		},
		{
			name: "cancel before commit of a single part",
			loc:  target,
			opts: small,
			run: func(ctx context.Context, cancel context.CancelFunc, w Writer) error {
				w.Write(data[:1000])
				cancel()
				return w.Commit()
			},
			wantErr: context.Canceled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			w, err := Create(ctx, tt.loc, tt.opts...)
			if err == nil {
				defer w.Abort()
				err = tt.run(ctx, cancel, w)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			for _, s := range tt.noText {
				if strings.Contains(err.Error(), s) {
					t.Fatalf("error shows a secret: %v", err)
				}
			}
			t.Logf("error: %v", err)
			got := readAllStream(t, target)
			if !bytes.Equal(got, old) {
				t.Fatalf("previous object changed: %d bytes", len(got))
			}
			if up := pendingUploads(t, srv, bucket); len(up) != 0 {
				t.Fatalf("uploads left: %v", up)
			}
		})
	}
	if _, err := Stat(ctx, "s3://no-such-bucket/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat in missing bucket: %v", err)
	}
	if _, err := List(ctx, "s3://no-such-bucket/"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("List of missing bucket: %v", err)
	}
	if _, err := Open(ctx, Join(bucket, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of missing object: %v", err)
	}
}

// TestS3ServerKilled kills the server in the middle of a multipart upload:
// the writer must fail, no object may appear, and after a restart the
// left-over upload is found and removed by AbortIncompleteUploads.
func TestS3ServerKilled(t *testing.T) {
	srv, bucket := startS3(t)
	ctx := context.Background()
	loc := Join(bucket, "killed", "obj")
	data := randBytes(4*testPart, 3)
	w, err := Create(ctx, loc, WithPartSize(testPart), WithParallelism(2), WithS3Config(S3Config{MaxRetries: 2}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	if _, err := w.Write(data[:2*testPart+1]); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	_, werr := w.Write(data[2*testPart+1:])
	if werr == nil {
		werr = w.Commit()
	}
	if werr == nil {
		t.Fatal("upload to a killed server succeeded")
	}
	t.Logf("error: %v", werr)
	if err := w.Commit(); err == nil {
		t.Fatal("Commit after a failed Write succeeded")
	}
	srv.Restart(t)
	if _, err := Stat(ctx, loc); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after the failed upload: %v, want not exist", err)
	}
	if l, err := List(ctx, Join(bucket, "killed")); err != nil || len(l) != 0 {
		t.Fatalf("List = %v, %v; want nothing", l, err)
	}
	n, err := AbortIncompleteUploads(ctx, Join(bucket, "killed/"), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("aborted %d left-over uploads", n)
	if up := pendingUploads(t, srv, bucket); len(up) != 0 {
		t.Fatalf("uploads left after cleanup: %v", up)
	}
}

func TestS3StatListRemove(t *testing.T) {
	_, bucket := startS3(t)
	ctx := context.Background()
	for _, k := range []string{"p/a", "p/sub/b", "px/c", "q"} {
		if err := writeAll(ctx, Join(bucket, k), []byte(k), 100); err != nil {
			t.Fatal(err)
		}
	}
	l, err := List(ctx, Join(bucket, "p"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range l {
		got = append(got, strings.TrimPrefix(i.Loc, bucket+"/"))
	}
	if strings.Join(got, ",") != "p/a,p/sub/b" {
		t.Fatalf("List(p) = %v", got)
	}
	if l, err := List(ctx, bucket); err != nil || len(l) != 4 {
		t.Fatalf("List(bucket) = %v, %v", l, err)
	}
	if err := Remove(ctx, Join(bucket, "p/a")); err != nil {
		t.Fatal(err)
	}
	if err := Remove(ctx, Join(bucket, "p/a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("second Remove: %v", err)
	}
	if _, err := Stat(ctx, Join(bucket, "p/a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after Remove: %v", err)
	}
}

// TestS3ReaderPinned replaces an object under an open Reader: reads fail
// with ErrChanged instead of mixing two versions.
func TestS3ReaderPinned(t *testing.T) {
	_, bucket := startS3(t)
	ctx := context.Background()
	loc := Join(bucket, "pinned")
	if err := writeAll(ctx, loc, []byte("version one"), 100); err != nil {
		t.Fatal(err)
	}
	r, err := Open(ctx, loc)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := writeAll(ctx, loc, []byte("version two"), 100, WithOverwrite(true)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := r.ReadAt(buf, 0); !errors.Is(err, ErrChanged) {
		t.Fatalf("ReadAt after replace: %v, want ErrChanged", err)
	}
}

func TestS3ConfigNoSecrets(t *testing.T) {
	c := S3Config{AccessKeyID: "AKIA1", SecretAccessKey: "s3cr3t-value", SessionToken: "t0ken-value"}
	for _, s := range []string{c.String(), c.GoString()} {
		if strings.Contains(s, "s3cr3t") || strings.Contains(s, "t0ken") {
			t.Fatalf("secret shown: %s", s)
		}
	}
	for _, tt := range []struct {
		host string
		want bool
	}{{"127.0.0.1:7070", true}, {"localhost:9000", true}, {"[::1]:80", true}, {"s3.amazonaws.com", false}, {"minio.internal:9000", false}} {
		if got := isLocalHost(tt.host); got != tt.want {
			t.Errorf("isLocalHost(%q) = %v", tt.host, got)
		}
	}
	for _, loc := range []string{"s3://", "s3:///k", "s3://b", "s3://b/", "s3://b/dir/"} {
		if _, err := Create(context.Background(), loc); !errors.Is(err, ErrBadLocation) {
			t.Errorf("Create(%q) = %v, want ErrBadLocation", loc, err)
		}
	}
}

// TestS3StreamStop closes and cancels streams in the middle of the
// read-ahead: Close returns (all fetchers have ended), and a cancelled
// stream reports the context's error rather than a short read.
func TestS3StreamStop(t *testing.T) {
	_, bucket := startS3(t)
	ctx := context.Background()
	loc := Join(bucket, "stream")
	data := randBytes(6*testPart+3, 8)
	if err := writeAll(ctx, loc, data, 1<<20, WithPartSize(testPart)); err != nil {
		t.Fatal(err)
	}
	opts := []Option{WithPartSize(testPart), WithParallelism(2)}

	s, _, err := OpenStream(ctx, loc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, testPart+10)
	if _, err := io.ReadFull(s, head); err != nil || !bytes.Equal(head, data[:len(head)]) {
		t.Fatalf("first bytes: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(head); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v, want ErrClosed", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	s, _, err = OpenStream(cctx, loc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := io.ReadFull(s, head); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.Copy(io.Discard, s); !errors.Is(err, context.Canceled) {
		t.Fatalf("copy after cancel: %v, want context.Canceled", err)
	}
}

// iotestHalfReader returns at most half of what is asked (at least 1
// byte), hiding any WriteTo of the underlying reader.
type iotestHalfReader struct{ r io.Reader }

func (h iotestHalfReader) Read(p []byte) (int, error) {
	return h.r.Read(p[:(len(p)+1)/2])
}

// TestS3ConfigFromEnv reaches the server with the credentials of a shared
// credentials file profile chosen by AWS_PROFILE, the endpoint of
// AWS_ENDPOINT_URL and the region of AWS_DEFAULT_REGION, as AWS tools do.
func TestS3ConfigFromEnv(t *testing.T) {
	srv, bucket := startS3(t)
	ctx := context.Background()
	if err := writeAll(ctx, Join(bucket, "k"), []byte("x"), 1); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(t.TempDir(), "credentials")
	os.WriteFile(creds, []byte("[default]\naws_access_key_id = nobody\naws_secret_access_key = nothing\n\n[ferry]\naws_access_key_id = "+
		srv.AccessKey+"\naws_secret_access_key = "+srv.SecretKey+"\n"), 0o600)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", srv.Region)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "ferry")
	if info, err := Stat(ctx, Join(bucket, "k")); err != nil || info.Size != 1 {
		t.Fatalf("Stat with profile ferry = %+v, %v", info, err)
	}
	t.Setenv("AWS_PROFILE", "")
	_, err := Stat(ctx, Join(bucket, "k"), WithS3Config(S3Config{MaxRetries: 1}))
	if !errors.Is(err, ErrAccessDenied) || !strings.Contains(err.Error(), `"nobody"`) {
		t.Fatalf("Stat with the default profile = %v, want access denied for key nobody", err)
	}
	if strings.Contains(err.Error(), "nothing") {
		t.Fatalf("error shows the secret: %v", err)
	}
	// The endpoint's scheme selects TLS.
	for _, tt := range []struct {
		endpoint, scheme string
	}{{"https://127.0.0.1:1", "https"}, {"http://s3.internal:9000", "http"}} {
		cl, err := newS3Client(S3Config{Endpoint: tt.endpoint})
		if err != nil {
			t.Fatal(err)
		}
		if got := cl.core.EndpointURL().Scheme; got != tt.scheme {
			t.Errorf("endpoint %s: scheme %s", tt.endpoint, got)
		}
	}
	if _, err := newS3Client(S3Config{Endpoint: "ftp://x"}); !errors.Is(err, ErrBadOption) {
		t.Errorf("ftp endpoint: %v", err)
	}
}

// TestS3NoClobber commits another object at the key while a writer without
// overwrite is open: its Commit fails with fs.ErrExist and the other
// object stays.
func TestS3NoClobber(t *testing.T) {
	srv, bucket := startS3(t)
	ctx := context.Background()
	for _, tc := range []struct {
		size      int
		statCheck bool
	}{{1000, true}, {2*testPart + 1, true}, {1000, false}, {2*testPart + 1, false}} {
		size := tc.size
		commitStatCheck = tc.statCheck // false: only If-None-Match protects the winner
		defer func() { commitStatCheck = true }()
		loc := Join(bucket, fmt.Sprintf("noclobber-%d-%v", size, tc.statCheck))
		w, err := Create(ctx, loc, WithPartSize(testPart))
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		if _, err := w.Write(randBytes(size, 4)); err != nil {
			t.Fatal(err)
		}
		if err := writeAll(ctx, loc, []byte("winner"), 100); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("size %d: Commit = %v, want fs.ErrExist", size, err)
		}
		if got := readAllStream(t, loc); string(got) != "winner" {
			t.Fatalf("size %d: object is %d bytes, want the winner's", size, len(got))
		}
	}
	if up := pendingUploads(t, srv, bucket); len(up) != 0 {
		t.Fatalf("uploads left: %v", up)
	}
}
