package queuecore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

type jsonRaw = json.RawMessage

var errNotEventStream = errors.New("the answer is not a text/event-stream")

func (cs *Consumer) joinRequest(ctx context.Context, memberID string) (*Membership, error) {
	body := map[string]any{"clientId": truncate(cs.opts.ClientID, 200), "maxInFlight": cs.window}
	if memberID != "" {
		body["memberId"] = memberID
	}
	if cs.opts.SessionTimeout > 0 {
		body["sessionTimeout"] = durationMs(cs.opts.SessionTimeout)
	}
	out := &Membership{}
	// A rejoin with our id is idempotent; a first join would leave a second member behind.
	c := call{method: "POST", path: cs.path("members"), body: body, idempotent: memberID != ""}
	if err := cs.t.do(ctx, c, out); err != nil {
		return nil, err
	}
	cs.holdings.joined(out, cs.window)
	return out, nil
}

// rejoin rejoins with our id (shouldRejoin), or as a new member when lost is gone.
func (cs *Consumer) rejoin(ctx context.Context, lost string) error {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	current := cs.membership
	if current == nil || (lost != "" && current.MemberID != lost) {
		return nil // the other goroutine replaced the lost member already
	}
	var next *Membership
	var err error
	if lost == "" {
		next, err = cs.joinRequest(ctx, current.MemberID)
	}
	var apiErr *Error
	if lost != "" || (errors.As(err, &apiErr) && apiErr.Code == "MEMBER_NOT_FOUND") {
		next, err = cs.joinRequest(ctx, "")
	}
	if err != nil {
		return err
	}
	cs.membership = next
	if next.MemberID != current.MemberID {
		cs.holdings.releaseAll() // their leases ended with the old member
	}
	if next.MemberID != current.MemberID || next.GenerationID != current.GenerationID {
		cs.logf("queuecore consumer %s/%s rejoined as %s (generation %d, partitions %v)",
			cs.topic, cs.group, next.MemberID, next.GenerationID, next.Assignments)
		cs.emit(Event{Kind: EventRebalanced, MemberID: next.MemberID, GenerationID: next.GenerationID, Partitions: next.Assignments})
	}
	return nil
}

func (cs *Consumer) heartbeatLoop(ctx context.Context) {
	for {
		m := cs.Membership()
		interval := time.Duration(m.HeartbeatIntervalMs) * time.Millisecond
		if interval <= 0 {
			interval = 3 * time.Second
		}
		if !sleep(ctx, interval) {
			return
		}
		if err := cs.heartbeat(ctx, m.MemberID, 0); err != nil && ctx.Err() == nil {
			cs.report(err)
		}
	}
}

// heartbeat keeps the member alive (on the lease budget, not the consume budget); a window above
// zero sets the member's window too.
func (cs *Consumer) heartbeat(ctx context.Context, memberID string, window int) error {
	var out struct {
		ShouldRejoin bool  `json:"shouldRejoin"`
		AckTimeoutMs int64 `json:"ackTimeoutMs"`
	}
	c := call{method: "POST", path: cs.path("members", memberID, "heartbeat"), idempotent: true}
	if window > 0 {
		c.body = map[string]any{"maxInFlight": window}
	}
	err := cs.t.do(ctx, c, &out)
	var apiErr *Error
	if errors.As(err, &apiErr) && apiErr.Code == "MEMBER_NOT_FOUND" {
		return cs.rejoin(ctx, memberID)
	}
	if err != nil {
		return err
	}
	if out.AckTimeoutMs > 0 {
		cs.holdings.setAckTimeout(time.Duration(out.AckTimeoutMs) * time.Millisecond)
	}
	if out.ShouldRejoin {
		return cs.rejoin(ctx, "")
	}
	return nil
}

// leave ends the membership once; a member already evicted is not an error.
func (cs *Consumer) leave() {
	cs.mu.Lock()
	m := cs.membership
	if m == nil || cs.left {
		cs.left = true
		cs.mu.Unlock()
		return
	}
	cs.left = true
	cs.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	err := cs.t.do(ctx, call{method: "DELETE", path: cs.path("members", m.MemberID), idempotent: true}, nil)
	var apiErr *Error
	if err != nil && !(errors.As(err, &apiErr) && apiErr.Status == 404) {
		cs.report(err) // the server evicts it after its session timeout
	}
}

// streamOnce reads one Server-Sent Events stream until it ends, buffering its messages.
func (cs *Consumer) streamOnce(recvCtx context.Context) error {
	member := cs.memberID()
	streamCtx, cancel := context.WithCancel(recvCtx)
	defer cancel()
	query := url.Values{"maxInFlight": {strconv.Itoa(cs.window)}}
	resp, err := cs.t.send(streamCtx, call{method: "GET", path: cs.path("members", member, "stream"), query: query}, true)
	if err != nil {
		return err
	}
	cs.mu.Lock()
	cs.serverWindow = cs.window
	cs.mu.Unlock()
	defer resp.Body.Close()
	requestID := resp.Header.Get("X-Request-Id")
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return fmt.Errorf("%w (%s)", errNotEventStream, resp.Header.Get("Content-Type"))
	}
	cs.connectedNow()
	idle := time.AfterFunc(streamIdleTimeout, cancel)
	defer idle.Stop()
	events := newSSEReader(resp.Body, func() { idle.Reset(streamIdleTimeout) })
	for {
		ev, err := events.next()
		if err != nil {
			return &Error{Code: "CONNECTION_ERROR", Message: "the stream broke: " + err.Error(), RequestID: requestID, Err: err}
		}
		switch ev.kind {
		case "error":
			return errorFromEvent([]byte(ev.data), requestID)
		case "message":
			if err := cs.arrive([]byte(ev.data), member); err != nil {
				return err
			}
		}
		if recvCtx.Err() != nil {
			return nil
		}
	}
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
