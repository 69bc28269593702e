package ckpt

import "io"

// edgeReader serves reads of a torch.save archive from two prefetched
// windows, its head and its tail, where archive/zip finds everything it
// needs (the end-of-central-directory record and central directory at the
// end; data.pkl and the local headers at the start). Opening a blob then
// costs two reads, which matters on object stores where every read is a
// request. Reads outside both windows go to the underlying reader.
type edgeReader struct {
	r          io.ReaderAt
	size       int64
	head, tail []byte
	tailOff    int64
}

const edgeWindow = 16 << 10

func newEdgeReader(r io.ReaderAt, size int64) (*edgeReader, error) {
	e := &edgeReader{r: r, size: size}
	if size <= 2*edgeWindow {
		e.head = make([]byte, size)
		if _, err := r.ReadAt(e.head, 0); err != nil && err != io.EOF {
			return nil, err
		}
		return e, nil
	}
	e.head = make([]byte, edgeWindow)
	if _, err := r.ReadAt(e.head, 0); err != nil && err != io.EOF {
		return nil, err
	}
	e.tailOff = size - edgeWindow
	e.tail = make([]byte, edgeWindow)
	if _, err := r.ReadAt(e.tail, e.tailOff); err != nil && err != io.EOF {
		return nil, err
	}
	return e, nil
}

func (e *edgeReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, io.ErrUnexpectedEOF
	}
	end := off + int64(len(p))
	switch {
	case end <= int64(len(e.head)):
		return copy(p, e.head[off:end]), nil
	case e.tail != nil && off >= e.tailOff && end <= e.size:
		return copy(p, e.tail[off-e.tailOff:end-e.tailOff]), nil
	case off >= e.size:
		return 0, io.EOF
	}
	n, err := e.r.ReadAt(p[:min(int64(len(p)), e.size-off)], off)
	if err == nil && n < len(p) {
		err = io.EOF
	}
	return n, err
}
