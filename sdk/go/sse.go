package queuecore

import (
	"bufio"
	"io"
	"strings"
)

// sseEvent is one Server-Sent Event: its type and its (joined) data lines.
type sseEvent struct {
	kind string
	data string
}

// sseReader turns lines into events; comments (keep-alives) and ids are skipped.
type sseReader struct {
	lines  *bufio.Reader
	onLine func() // called per line read, to push the idle deadline back
}

func newSSEReader(r io.Reader, onLine func()) *sseReader {
	return &sseReader{lines: bufio.NewReaderSize(r, 64*1024), onLine: onLine}
}

// next returns the next event, or io.EOF when the stream ended cleanly.
func (r *sseReader) next() (sseEvent, error) {
	kind, data := "message", []string(nil)
	for {
		line, err := r.lines.ReadString('\n')
		if err != nil {
			if err == io.EOF && len(data) > 0 {
				return sseEvent{kind, strings.Join(data, "\n")}, nil
			}
			return sseEvent{}, err
		}
		r.onLine()
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if len(data) > 0 {
				return sseEvent{kind, strings.Join(data, "\n")}, nil
			}
			kind = "message"
		case strings.HasPrefix(line, ":"):
		default:
			name, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			if name == "event" {
				kind = value
			} else if name == "data" {
				data = append(data, value)
			}
		}
	}
}
