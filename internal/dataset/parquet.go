package dataset

import (
	"bytes"
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// parseParquet reads the instruction/input/output columns of a Parquet
// file. Columns must be string or large_string; a null is a field error.
func parseParquet(name string, data []byte, res *Result, bad func(*RecordError) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: parquet: %v", ErrSyntax, name, p)
		}
	}()
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%w: %s: parquet: %v", ErrSyntax, name, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 16}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("%w: %s: parquet: %v", ErrSyntax, name, err)
	}
	schema, err := fr.Schema()
	if err != nil {
		return fmt.Errorf("%w: %s: parquet schema: %v", ErrSyntax, name, err)
	}
	cols := [3]int{-1, -1, -1}
	for i, n := range fieldNames {
		idx := schema.FieldIndices(n)
		if len(idx) == 0 {
			if i == 1 {
				continue
			}
			return fmt.Errorf("%w: %s: parquet has no column %q (columns: %v)", ErrField, name, n, columnNames(schema))
		}
		f := schema.Field(idx[0])
		if f.Type.ID() != arrow.STRING && f.Type.ID() != arrow.LARGE_STRING {
			return fmt.Errorf("%w: %s: parquet column %q is %s, want string or large_string", ErrField, name, n, f.Type)
		}
		cols[i] = idx[0]
	}
	var colData [3]*arrow.Chunked
	for i, c := range cols {
		if c < 0 {
			continue
		}
		cr, err := fr.GetColumn(context.Background(), c)
		if err != nil {
			return fmt.Errorf("%w: %s: parquet column %q: %v", ErrSyntax, name, fieldNames[i], err)
		}
		ch, err := cr.NextBatch(pf.NumRows())
		if err != nil {
			return fmt.Errorf("%w: %s: parquet column %q: %v", ErrSyntax, name, fieldNames[i], err)
		}
		defer ch.Release()
		if int64(ch.Len()) != pf.NumRows() {
			return fmt.Errorf("%w: %s: parquet column %q has %d values, want %d rows", ErrSyntax, name, fieldNames[i], ch.Len(), pf.NumRows())
		}
		colData[i] = ch
	}
	n := pf.NumRows()
	type cursor struct {
		chunks []arrow.Array
		ci, at int
	}
	var cur [3]cursor
	for i := range cur {
		if colData[i] != nil {
			cur[i].chunks = colData[i].Chunks()
		}
	}
	value := func(c *cursor) (string, bool) {
		for c.at >= c.chunks[c.ci].Len() {
			c.ci++
			c.at = 0
		}
		a := c.chunks[c.ci]
		j := c.at
		c.at++
		if a.IsNull(j) {
			return "", false
		}
		switch a := a.(type) {
		case *array.String:
			return a.Value(j), true
		case *array.LargeString:
			return a.Value(j), true
		}
		return "", false
	}
	for row := range n {
		var rec Record
		var fe error
		var field string
		for i := range cur {
			if cur[i].chunks == nil {
				continue
			}
			v, ok := value(&cur[i])
			if !ok && i == 1 {
				ok = true // a null input is an absent input
			}
			switch {
			case !ok && fe == nil:
				fe, field = fmt.Errorf("%w: field %q is null, want a string", ErrField, fieldNames[i]), fieldNames[i]
			case ok && !utf8.ValidString(v) && fe == nil:
				fe, field = fmt.Errorf("%w: field %q is not valid UTF-8", ErrUTF8, fieldNames[i]), fieldNames[i]
			}
			v = string([]byte(v)) // detach from the Arrow buffers
			switch i {
			case 0:
				rec.Instruction = v
			case 1:
				rec.Input = v
			case 2:
				rec.Output = v
			}
		}
		if fe != nil {
			if err := bad(&RecordError{File: name, Index: row, Offset: -1, Field: field, Err: fe}); err != nil {
				return err
			}
			continue
		}
		res.Records = append(res.Records, rec)
		res.Samples = append(res.Samples, row)
	}
	return nil
}

func columnNames(s *arrow.Schema) []string {
	out := make([]string, s.NumFields())
	for i, f := range s.Fields() {
		out[i] = f.Name
	}
	return out
}
