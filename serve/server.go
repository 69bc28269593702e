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
	// FileKeep is how long a model file read for clients (MsgFile, see
	// weights.go) stays cached after the last request for it. Default 10 s.
	FileKeep time.Duration
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
	if c.FileKeep == 0 {
		c.FileKeep = 10 * time.Second
	}
}

// Server serves one dataset to any number of clients. Create it with
// NewServer, run it with Serve, release it with Close.
type Server struct {
	cfg   Config
	ds    *Dataset // nil: model files only
	files *fileCache
	ctx   context.Context

	nextID   atomic.Uint64
	mu       sync.Mutex
	sessions map[*session]struct{}
	closed   bool
	wg       sync.WaitGroup
}

// NewServer opens the dataset of cfg.Data and maps its shards. On systems
// other than Linux it returns an error wrapping ErrUnsupported.
func NewServer(ctx context.Context, cfg Config) (*Server, error) {
	if err := checkOS(); err != nil {
		return nil, err
	}
	cfg.defaults()
	var ds *Dataset
	if cfg.Data != "" {
		var err error
		ds, err = OpenDataset(ctx, cfg.Data, WithRanks(cfg.Ranks...), WithCacheDir(cfg.CacheDir), WithVerify(cfg.Verify), WithLogf(cfg.Logf))
		if err != nil {
			return nil, err
		}
	}
	files := &fileCache{files: map[string]*cachedFile{}, keep: cfg.FileKeep, logf: cfg.Logf}
	return &Server{cfg: cfg, ds: ds, files: files, ctx: context.Background(), sessions: map[*session]struct{}{}}, nil
}

// Dataset returns the served dataset, nil when Config.Data is empty (the
// daemon then serves model files only).
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
	s.files.close()
	if s.ds == nil {
		return nil
	}
	return s.ds.Close()
}

// session is one connected client.
type session struct {
	srv  *Server
	conn *net.UnixConn
	id   uint64

	once sync.Once
}

// abort sends a final MsgError (best effort) and shuts the connection down
// both ways, which ends the session's reads; run closes it. Shutting down
// instead of closing at once matters: a Unix socket closed with unread
// messages resets the peer, which would then lose the MsgError.
func (ss *session) abort(code uint32, text string) {
	ss.once.Do(func() {
		ss.conn.SetWriteDeadline(time.Now().Add(time.Second))
		ss.conn.Write(AppendError(nil, code, text))
		ss.conn.CloseWrite()
		ss.conn.CloseRead()
	})
}

func (ss *session) run() {
	s := ss.srv
	defer func() {
		ss.drain()
		ss.conn.Close()
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

// drain reads what the client sent and nobody read, so that closing does
// not reset the connection (see abort).
func (ss *session) drain() {
	ss.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	buf := make([]byte, MaxMsgSize+1)
	for {
		if n, err := ss.conn.Read(buf); err != nil || n == 0 {
			return
		}
	}
}

// fail reports err to the client with code, ends the session and returns err.
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
	if err == nil && h.Type == MsgFile {
		return ss.serveFiles(s.ctx, buf, p)
	}
	if err == nil && h.Type == MsgHello && s.ds == nil {
		return ss.fail(CodeNotServed, errors.New("this daemon serves no data set (start it with --data), model files only"))
	}
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
	lay, err := NewLayout(hello.Slots, hello.MaxRows, uint32(s.ds.SeqLen), mode, hello.Flags)
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
	ready, err := shm.Eventfd()
	if err != nil {
		mfd.Close()
		return ss.fail(CodeIO, err)
	}
	defer ready.Close()
	free, err := shm.Eventfd()
	if err != nil {
		mfd.Close()
		return ss.fail(CodeIO, err)
	}
	err = shm.SendFds(ss.conn, AppendWelcome(nil, Welcome{Version: Version, ShmSize: lay.TotalSize(), Info: s.ds.Info()}), mfd, ready, free)
	mfd.Close() // the mapping and the client's descriptor keep the memory
	if err != nil {
		free.Close()
		return fmt.Errorf("sending WELCOME: %w", err)
	}
	s.cfg.Logf("client %d (rank %d worker %d): %d slots × %d rows, %d bytes", ss.id, hello.Rank, hello.Worker, lay.Slots, lay.MaxRows, lay.TotalSize())

	// The filler prepares batches as plans arrive and slots come back; this
	// goroutine reads the socket. Either one ending ends the session: EOF
	// (the client is gone) closes free, which wakes the filler; a filler
	// error closes the connection, which wakes the reader.
	plans := make(chan []Run, MaxPlanAhead)
	fillErr := make(chan error, 1)
	go func() { fillErr <- ss.fill(&lay, mem, plans, free, ready) }()
	rerr := ss.read(buf, &lay, plans)
	close(plans)
	free.Close()
	ferr := <-fillErr
	if ferr != nil && !errors.Is(ferr, os.ErrClosed) {
		return ferr // already reported to the client by fill
	}
	return rerr
}

// read receives PLAN messages until the client closes the connection.
func (ss *session) read(buf []byte, lay *Layout, plans chan<- []Run) error {
	var rows uint64 // rows of the batch being planned (runs with RunContinues)
	for {
		n, err := ss.conn.Read(buf)
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil // client gone, shutdown, or the filler failed
			}
			return err
		}
		if n == 0 {
			return nil // SOCK_SEQPACKET: a zero-length read is the peer's close
		}
		h, p, err := ParseMsg(buf[:n])
		if err == nil && h.Type != MsgPlan {
			err = fmt.Errorf("%w: message type %d, want PLAN (%d)", ErrProtocol, h.Type, MsgPlan)
		}
		var runs []Run
		if err == nil {
			runs, err = ParsePlan(p, make([]Run, 0, (len(p)-planFixed)/RunSize))
		}
		if err != nil {
			return ss.fail(CodeBadRequest, err)
		}
		for i, r := range runs {
			if err := ss.srv.ds.checkRun(r); err != nil {
				code := CodeLimit
				if errors.Is(err, ErrNotServed) {
					code = CodeNotServed
				}
				return ss.fail(code, fmt.Errorf("PLAN run %d: %w", i, err))
			}
			rows += uint64(r.Rows)
			if rows > uint64(lay.MaxRows) {
				return ss.fail(CodeLimit, fmt.Errorf("%w: PLAN run %d: a batch of %d or more rows, the ring holds %d per slot (max_rows)", ErrLimit, i, rows, lay.MaxRows))
			}
			if r.Flags&RunContinues == 0 {
				rows = 0
			}
		}
		select {
		case plans <- runs:
		default:
			return ss.fail(CodeLimit, fmt.Errorf("%w: more than %d PLAN messages queued ahead of the filled batches", ErrLimit, MaxPlanAhead))
		}
	}
}

// fill prepares the planned batches in order: batch n goes to slot n % slots
// once that slot is free (the ring starts all free; the client hands slots
// back through the free eventfd), then the ready eventfd gets +1. It does not
// allocate per batch.
func (ss *session) fill(lay *Layout, mem []byte, plans <-chan []Run, free, ready *os.File) error {
	var (
		seq    uint64
		avail  = uint64(lay.Slots)
		b      [8]byte
		one    = le.AppendUint64(nil, 1)
		carry  []Run // runs of a batch that continues in the next PLAN message
		merged []Run
	)
	for runs := range plans {
		if len(carry) > 0 {
			merged = append(append(merged[:0], carry...), runs...)
			runs, carry = merged, carry[:0]
		}
		start := 0 // first run of the current batch
		for i, r := range runs {
			if r.Flags&RunContinues != 0 {
				continue
			}
			for avail == 0 {
				n, err := free.Read(b[:])
				if err != nil {
					return err
				}
				if n == 8 {
					avail += le.Uint64(b[:])
				}
			}
			if avail > uint64(lay.Slots) {
				err := fmt.Errorf("%w: the client handed back more slots than it holds", ErrProtocol)
				ss.fail(CodeBadRequest, err)
				return err
			}
			ss.fillOne(lay, mem, seq, runs[start:i+1])
			if _, err := ready.Write(one); err != nil {
				ss.fail(CodeIO, err)
				return err
			}
			seq++
			avail--
			start = i + 1
		}
		carry = append(carry, runs[start:]...)
	}
	return nil
}

// fillOne fills slot seq % slots with the batch of runs.
func (ss *session) fillOne(lay *Layout, mem []byte, seq uint64, runs []Run) {
	off := lay.SlotOffset(uint32(seq % uint64(lay.Slots)))
	slot := mem[off : off+lay.SlotSize]
	PutSlotHeader(slot, SlotHeader{Seq: seq, State: SlotEmpty})
	rows := ss.srv.ds.fillSlot(lay, slot, runs)
	PutSlotHeader(slot, SlotHeader{Seq: seq, Rows: uint32(rows), State: SlotFilled})
}
