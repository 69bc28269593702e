package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ferryml/ferry/internal/shm"
)

// Config configures a Server. The zero value of every field but Data is a
// usable default.
type Config struct {
	// Data is the dataprep output: a local directory or an s3:// prefix.
	Data string
	// Ranks are the shards to map (the node's local ranks). Default: all.
	Ranks []int
	// CacheDir receives shards fetched from S3. Default: $TMPDIR/ferry-serve-cache.
	CacheDir string
	// Verify checks the SHA-256 of local shards at start (fetched shards are
	// always checked). Default false: sizes, magic and offsets are always checked.
	Verify bool
	// MaxClientBytes bounds the ring of one client. Default 4 GiB.
	MaxClientBytes int64
	// MaxClients bounds concurrent clients. Default 1024.
	MaxClients int
	// HelloTimeout bounds the wait for a new client's MsgHello. Default 10 s.
	HelloTimeout time.Duration
	// Logf receives one line per client event. Default: no logging.
	Logf func(format string, args ...any)
}

func (c *Config) defaults() {
	if c.CacheDir == "" {
		c.CacheDir = os.TempDir() + "/ferry-serve-cache"
	}
	if c.MaxClientBytes <= 0 {
		c.MaxClientBytes = 4 << 30
	}
	if c.MaxClients <= 0 {
		c.MaxClients = 1024
	}
	if c.HelloTimeout <= 0 {
		c.HelloTimeout = 10 * time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
}

// Server serves one dataset to any number of clients. Create it with
// NewServer, run it with Serve, release it with Close.
type Server struct {
	cfg Config
	ds  *Dataset

	nextID   atomic.Uint64
	mu       sync.Mutex
	sessions map[*session]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// NewServer opens the dataset of cfg.Data and maps its shards.
func NewServer(ctx context.Context, cfg Config) (*Server, error) {
	cfg.defaults()
	ds, err := OpenDataset(ctx, cfg.Data, cfg.Ranks, cfg.CacheDir, cfg.Verify)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, ds: ds, sessions: map[*session]struct{}{}}, nil
}

// Dataset returns the served dataset.
func (s *Server) Dataset() *Dataset { return s.ds }

// Clients returns the number of connected clients.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// Listen creates the Unix SOCK_SEQPACKET socket at path. A socket file left
// by a daemon that died is replaced; a live daemon on path is an error.
func Listen(path string) (*net.UnixListener, error) {
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("serve: listen %s: exists and is not a socket", path)
		}
		c, err := net.DialTimeout("unixpacket", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("serve: listen %s: another ferry-serve is listening there", path)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("serve: listen %s: probing the existing socket: %w", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("serve: listen %s: removing the stale socket: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("serve: listen %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

// Serve accepts clients on ln until ctx is done, then tells every client the
// daemon is shutting down (MsgError, CodeShutdown), closes their connections,
// waits for their goroutines, closes ln and returns nil. Any other accept
// failure is returned.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var err error
	for {
		c, aerr := ln.AcceptUnix()
		if aerr != nil {
			if ctx.Err() == nil {
				err = fmt.Errorf("serve: accept: %w", aerr)
			}
			break
		}
		s.mu.Lock()
		if s.closed || len(s.sessions) >= s.cfg.MaxClients {
			full := !s.closed
			s.mu.Unlock()
			if full {
				c.Write(AppendError(nil, CodeLimit, fmt.Sprintf("ferry-serve: %d clients connected, the limit", s.cfg.MaxClients)))
			}
			c.Close()
			continue
		}
		ss := &session{srv: s, conn: c, id: s.nextID.Add(1)}
		s.sessions[ss] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go ss.run()
	}
	ln.Close()
	s.shutdown()
	return err
}

// shutdown ends every session with CodeShutdown and waits for them.
func (s *Server) shutdown() {
	s.mu.Lock()
	s.closed = true
	for ss := range s.sessions {
		ss.abort(CodeShutdown, "ferry-serve is shutting down")
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Close shuts down any sessions and unmaps the dataset.
func (s *Server) Close() error {
	s.shutdown()
	return s.ds.Close()
}

// session is one connected client.
type session struct {
	srv  *Server
	conn *net.UnixConn
	id   uint64

	once sync.Once
}

// abort sends a final MsgError (best effort) and closes the connection,
// which ends run.
func (ss *session) abort(code uint32, text string) {
	ss.once.Do(func() {
		ss.conn.SetWriteDeadline(time.Now().Add(time.Second))
		ss.conn.Write(AppendError(nil, code, text))
		ss.conn.Close()
	})
}

func (ss *session) run() {
	s := ss.srv
	defer func() {
		ss.once.Do(func() { ss.conn.Close() })
		s.mu.Lock()
		delete(s.sessions, ss)
		s.mu.Unlock()
		s.wg.Done()
	}()
	if err := ss.serve(); err != nil {
		s.cfg.Logf("client %d: %v", ss.id, err)
	} else {
		s.cfg.Logf("client %d: disconnected, ring freed", ss.id)
	}
}

// clientError is an error to report to the client with a code.
type clientError struct {
	code uint32
	err  error
}

func (e *clientError) Error() string { return e.err.Error() }
func (e *clientError) Unwrap() error { return e.err }

func (ss *session) fail(code uint32, err error) error {
	ss.abort(code, "ferry-serve: "+err.Error())
	return err
}

func (ss *session) serve() error {
	s := ss.srv
	buf := make([]byte, MaxMsgSize+1)
	ss.conn.SetReadDeadline(time.Now().Add(s.cfg.HelloTimeout))
	n, err := ss.conn.Read(buf)
	if err != nil {
		return fmt.Errorf("waiting for HELLO: %w", err)
	}
	ss.conn.SetReadDeadline(time.Time{})
	h, p, err := ParseMsg(buf[:n])
	if err == nil && h.Type != MsgHello {
		err = fmt.Errorf("%w: first message is type %d, want HELLO (%d)", ErrProtocol, h.Type, MsgHello)
	}
	var hello Hello
	if err == nil {
		hello, err = ParseHello(p)
	}
	if err != nil {
		code := CodeBadRequest
		if errors.Is(err, ErrLimit) {
			code = CodeLimit
		}
		return ss.fail(code, err)
	}
	mode := ModePad
	if s.ds.Pack {
		mode = ModePack
	}
	lay, err := NewLayout(hello.Slots, hello.MaxRows, uint32(s.ds.SeqLen), mode)
	if err == nil && lay.TotalSize() > uint64(s.cfg.MaxClientBytes) {
		err = fmt.Errorf("%w: a ring of %d slots × %d rows × seq_len %d needs %d bytes, the daemon allows %d per client (--max-client-bytes)",
			ErrLimit, hello.Slots, hello.MaxRows, s.ds.SeqLen, lay.TotalSize(), s.cfg.MaxClientBytes)
	}
	if err != nil {
		return ss.fail(CodeLimit, err)
	}
	mfd, err := shm.Memfd(fmt.Sprintf("ferry-serve-rank%d-worker%d", hello.Rank, hello.Worker), int64(lay.TotalSize()))
	if err != nil {
		return ss.fail(CodeIO, err)
	}
	mem, err := shm.Map(mfd, int(lay.TotalSize()))
	if err != nil {
		mfd.Close()
		return ss.fail(CodeIO, err)
	}
	defer shm.Unmap(mem)
	lay.AppendHeader(mem[:0])
	efd, err := shm.Eventfd()
	if err != nil {
		mfd.Close()
		return ss.fail(CodeIO, err)
	}
	defer efd.Close()
	err = shm.SendFds(ss.conn, AppendWelcome(nil, Welcome{Version: Version, ShmSize: lay.TotalSize(), Info: s.ds.Info()}), mfd, efd)
	mfd.Close() // the mapping and the client's descriptor keep the memory
	if err != nil {
		return fmt.Errorf("sending WELCOME: %w", err)
	}
	s.cfg.Logf("client %d (rank %d worker %d): %d slots × %d rows, %d bytes", ss.id, hello.Rank, hello.Worker, lay.Slots, lay.MaxRows, lay.TotalSize())

	var fill Fill
	fill.Refs = make([]RowRef, 0, lay.MaxRows)
	one := le.AppendUint64(nil, 1)
	for {
		n, err := ss.conn.Read(buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil // client gone (or shutdown): the deferred calls free the ring
			}
			return err
		}
		if n == 0 {
			return nil // SOCK_SEQPACKET: a zero-length read is the peer's close
		}
		if err := ss.handle(buf[:n], &lay, mem, &fill); err != nil {
			var ce *clientError
			if errors.As(err, &ce) {
				return ss.fail(ce.code, ce.err)
			}
			return ss.fail(CodeIO, err)
		}
		if _, err := efd.Write(one); err != nil {
			return fmt.Errorf("signalling the ready eventfd: %w", err)
		}
	}
}

// handle processes one FILL message. It does not allocate.
func (ss *session) handle(msg []byte, lay *Layout, mem []byte, fill *Fill) error {
	h, p, err := ParseMsg(msg)
	if err == nil && h.Type != MsgFill {
		err = fmt.Errorf("%w: message type %d, want FILL (%d)", ErrProtocol, h.Type, MsgFill)
	}
	if err == nil {
		err = ParseFill(p, fill)
	}
	if err != nil {
		return &clientError{CodeBadRequest, err}
	}
	if fill.Slot >= lay.Slots || len(fill.Refs) == 0 || len(fill.Refs) > int(lay.MaxRows) {
		return &clientError{CodeLimit, fmt.Errorf("%w: FILL seq %d: slot %d of %d, %d rows of at most %d", ErrLimit, fill.Seq, fill.Slot, lay.Slots, len(fill.Refs), lay.MaxRows)}
	}
	off := lay.SlotOffset(fill.Slot)
	slot := mem[off : off+lay.SlotSize]
	PutSlotHeader(slot, SlotHeader{Seq: fill.Seq, State: SlotEmpty})
	if err := ss.srv.ds.fillSlot(lay, slot, fill.Refs); err != nil {
		code := CodeLimit
		if errors.Is(err, ErrNotServed) {
			code = CodeNotServed
		}
		return &clientError{code, fmt.Errorf("FILL seq %d: %w", fill.Seq, err)}
	}
	PutSlotHeader(slot, SlotHeader{Seq: fill.Seq, Rows: uint32(len(fill.Refs)), State: SlotFilled, Tag: fill.Tag})
	return nil
}
