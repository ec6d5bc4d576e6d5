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
	pending := sseEvent{kind: "message"}
	var data []string
	for {
		line, err := r.lines.ReadString('\n')
		if line != "" {
			r.onLine()
			if line = strings.TrimRight(line, "\r\n"); line == "" && len(data) > 0 {
				pending.data = strings.Join(data, "\n")
				return pending, nil
			}
			data = feed(&pending, line, data)
		}
		if err != nil {
			if err == io.EOF && len(data) > 0 {
				pending.data = strings.Join(data, "\n")
				return pending, nil
			}
			return sseEvent{}, err
		}
	}
}

// feed applies one non-terminating line to the event being read; it returns its data lines.
func feed(pending *sseEvent, line string, data []string) []string {
	switch {
	case line == "":
		pending.kind = "message" // an empty event: nothing to dispatch
	case strings.HasPrefix(line, ":"):
	default:
		name, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		if name == "event" {
			pending.kind = value
		} else if name == "data" {
			data = append(data, value)
		}
	}
	return data
}
