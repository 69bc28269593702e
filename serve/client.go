package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/ferryml/ferry/internal/shm"
)

// Client is the Go side of the protocol: the reference for the Python client
// (python/ferry/serve_client.py) and the tool of the tests and benchmarks.
// A Client is not safe for concurrent use, except Close.
type Client struct {
	conn   *net.UnixConn
	layout Layout
	mem    []byte
	efd    *os.File // ready: the daemon adds 1 per filled slot
	free   *os.File // the client adds the number of slots it hands back
	info   []byte
	ready  uint64 // slots signalled by the daemon and not yet returned by Wait
	next   uint64 // sequence number of the next batch Wait returns
	msg    []byte

	mu   sync.Mutex
	err  error // first error seen by the watcher: ErrDaemonGone or ErrRemote
	done chan struct{}
}

// Dial connects to the daemon at path, sends hello (its Version is set) and
// maps the ring it receives. On systems other than Linux it returns an
// error wrapping ErrUnsupported.
func Dial(ctx context.Context, path string, hello Hello) (_ *Client, err error) {
	if err := checkOS(); err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", path)
	if err != nil {
		return nil, fmt.Errorf("serve: connect to ferry-serve at %s: %w", path, err)
	}
	conn := nc.(*net.UnixConn)
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	hello.Version = Version
	if _, err := conn.Write(AppendHello(nil, hello)); err != nil {
		return nil, fmt.Errorf("serve: %s: sending HELLO: %w", path, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		conn.SetReadDeadline(dl)
	}
	buf := make([]byte, MaxMsgSize+1)
	n, fds, err := shm.RecvFds(conn, buf, 3)
	if err != nil {
		return nil, fmt.Errorf("serve: %s: waiting for WELCOME: %w", path, err)
	}
	conn.SetReadDeadline(time.Time{})
	closeFds := func() {
		for _, f := range fds {
			f.Close()
		}
	}
	if n == 0 {
		closeFds()
		return nil, fmt.Errorf("%w: %s: before WELCOME", ErrDaemonGone, path)
	}
	h, p, err := ParseMsg(buf[:n])
	if err != nil {
		closeFds()
		return nil, fmt.Errorf("serve: %s: %w", path, err)
	}
	if h.Type == MsgError {
		closeFds()
		_, text, _ := ParseError(p)
		return nil, fmt.Errorf("%w: %s", ErrRemote, text)
	}
	if h.Type != MsgWelcome || len(fds) != 3 {
		closeFds()
		return nil, fmt.Errorf("%w: %s: got message type %d with %d descriptors, want WELCOME with 3", ErrProtocol, path, h.Type, len(fds))
	}
	w, err := ParseWelcome(p)
	if err != nil {
		closeFds()
		return nil, err
	}
	mfd, efd, free := fds[0], fds[1], fds[2]
	defer mfd.Close()
	defer func() {
		if err != nil {
			efd.Close()
			free.Close()
		}
	}()
	seals, err := shm.GetSeals(mfd)
	if err != nil || seals&shm.Seals != shm.Seals {
		return nil, fmt.Errorf("%w: %s: ring memfd seals %#x (%v), want %#x", ErrProtocol, path, seals, err, shm.Seals)
	}
	st, err := mfd.Stat()
	if err != nil || st.Size() < ShmHeaderSize || uint64(st.Size()) != w.ShmSize {
		return nil, fmt.Errorf("%w: %s: ring memfd size does not match WELCOME's %d", ErrProtocol, path, w.ShmSize)
	}
	mem, err := shm.Map(mfd, int(st.Size()))
	if err != nil {
		return nil, err
	}
	lay, err := ParseHeader(mem, uint64(len(mem)))
	if err != nil {
		shm.Unmap(mem)
		return nil, err
	}
	c := &Client{conn: conn, layout: lay, mem: mem, efd: efd, free: free, info: append([]byte(nil), w.Info...),
		done: make(chan struct{})}
	go c.watch(buf)
	return c, nil
}

// watch reads the connection until it ends: after the WELCOME the daemon only
// sends MsgError, and closes.
func (c *Client) watch(buf []byte) {
	defer close(c.done)
	n, err := c.conn.Read(buf)
	var e error
	switch {
	case err == nil && n > 0:
		if h, p, perr := ParseMsg(buf[:n]); perr == nil && h.Type == MsgError {
			code, text, _ := ParseError(p)
			e = fmt.Errorf("%w (code %d): %s", ErrRemote, code, text)
		} else {
			e = fmt.Errorf("%w: unexpected message from the daemon", ErrProtocol)
		}
	case errors.Is(err, net.ErrClosed):
		e = ErrClosed
	default:
		e = fmt.Errorf("%w: ferry-serve exited or was killed", ErrDaemonGone)
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = e
	}
	c.mu.Unlock()
	c.efd.SetReadDeadline(time.Now())
}

// Err returns the error that ended the connection, if any.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Layout returns the ring layout.
func (c *Client) Layout() Layout { return c.layout }

// Info returns the daemon's dataset description (JSON).
func (c *Client) Info() []byte { return c.info }

// Plan sends the next batches to prepare (see Run). The daemon fills them
// into slots in order as slots are free: batch n of the connection (from 0)
// lands in slot n % slots.
func (c *Client) Plan(runs []Run) error {
	if err := c.Err(); err != nil {
		return err
	}
	c.msg = AppendPlan(c.msg[:0], runs)
	if _, err := c.conn.Write(c.msg); err != nil {
		// The daemon shut the connection down: its MsgError, if any, is
		// waiting to be read by the watcher.
		select {
		case <-c.done:
		case <-time.After(time.Second):
		}
		if e := c.Err(); e != nil {
			return e
		}
		return fmt.Errorf("%w: sending PLAN: %v", ErrDaemonGone, err)
	}
	return nil
}

// Release hands the n oldest batches returned by Wait back to the daemon;
// their slots must no longer be read.
func (c *Client) Release(n int) error {
	var b [8]byte
	le.PutUint64(b[:], uint64(n))
	if _, err := c.free.Write(b[:]); err != nil {
		return fmt.Errorf("serve: releasing slots: %w", err)
	}
	return nil
}

// Wait blocks until the daemon has filled the next batch and returns its
// slot (batches complete in plan order). It returns the error that ended
// the connection once no filled batch is left.
func (c *Client) Wait() (slot uint32, h SlotHeader, err error) {
	if c.ready == 0 {
		var b [8]byte
		for c.ready == 0 {
			n, err := c.efd.Read(b[:])
			if err == nil && n == 8 {
				c.ready = le.Uint64(b[:])
				break
			}
			if e := c.Err(); e != nil {
				return 0, h, e
			}
			if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				return 0, h, fmt.Errorf("serve: reading the ready eventfd: %w", err)
			}
		}
	}
	c.ready--
	slot = uint32(c.next % uint64(c.layout.Slots))
	h = ReadSlotHeader(c.Slot(slot))
	if h.Seq != c.next || h.State != SlotFilled {
		return slot, h, fmt.Errorf("%w: slot %d holds batch %d (state %d), want batch %d filled", ErrProtocol, slot, h.Seq, h.State, c.next)
	}
	c.next++
	return slot, h, nil
}

// Slot returns the bytes of slot i (valid until Close).
func (c *Client) Slot(i uint32) []byte {
	off := c.layout.SlotOffset(i)
	return c.mem[off : off+c.layout.SlotSize]
}

// Column returns the bytes of column id for the first rows rows of slot.
func (c *Client) Column(slot []byte, id, rows int) []byte {
	col := c.layout.Columns[id]
	if !col.Present() {
		return nil
	}
	return slot[col.Offset : col.Offset+uint64(rows)*uint64(col.Width)*col.ItemSize()]
}

// Close disconnects (the daemon frees the ring) and unmaps it.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.err == nil {
		c.err = ErrClosed
	}
	c.mu.Unlock()
	err := c.conn.Close()
	<-c.done
	c.efd.Close()
	c.free.Close()
	shm.Unmap(c.mem)
	c.mem = nil
	return err
}
