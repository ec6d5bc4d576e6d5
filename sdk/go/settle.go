package queuecore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Settling in the background: acks, nacks and lease extensions, sent in batches.
//
// An ack is queued and its caller goes on (AckWithResult waits for the verdict). Queued acks go
// in one request ackLinger after the first, at once when half the consumer's window waits for
// them (the server leases it nothing more until they land), and when the consumer stops. One
// flush is in flight or waiting at a time, the next starts at least minSettleInterval after the
// previous one, so a fast consumer spends a few consume requests a second on acks, never one per
// message. Nacks ride in the same flushes (one request for many), then extensions: after the
// acks queued before them, so an extension never names an offset whose ack is on its way.
// A refused ack or nack is reported once per request, whatever the number of ids.
const (
	ackLinger         = 50 * time.Millisecond
	minSettleInterval = 50 * time.Millisecond
	maxSettleIDs      = 1000
	settleTimeout     = 30 * time.Second
)

type queuedAck struct {
	ackID string
	done  chan error // nil: nobody waits
}

type queuedRefusal struct {
	ack    queuedAck
	reason string
}

type queuedNack struct {
	ackID      string
	reason     string
	retryDelay time.Duration
	done       chan nackOutcome
}

type nackOutcome struct {
	dead bool
	err  error
}

type queuedExtend struct {
	ackIDs  []string
	seconds int64
	done    chan extendOutcome
}

type extendOutcome struct {
	extended []string
	err      error
}

// settler batches a consumer's acks, nacks and extensions into few requests.
type settler struct {
	t      *transport
	path   func(rest ...string) string
	report func(error)
	urgent func(queuedAcks int) bool

	mu       sync.Mutex
	acks     []queuedAck
	refused  []queuedRefusal
	nacks    []queuedNack
	extends  []queuedExtend
	timer    *time.Timer
	flushing bool

	sendMu    sync.Mutex // one flush at a time
	lastStart time.Time
}

func (s *settler) pendingLocked() int {
	return len(s.acks) + len(s.refused) + len(s.nacks) + len(s.extends)
}

// ack queues an ack; with wait, a channel of its verdict.
func (s *settler) ack(ackID string, wait bool) chan error {
	item := queuedAck{ackID: ackID}
	if wait {
		item.done = make(chan error, 1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.acks = append(s.acks, item)
	delay := ackLinger
	if s.urgent(len(s.acks)) {
		delay = 0
	}
	s.scheduleLocked(delay)
	return item.done
}

// refuse answers an ack or nack not worth sending (its lease is known to have ended).
func (s *settler) refuse(ackID, reason string, wait bool) chan error {
	item := queuedAck{ackID: ackID}
	if wait {
		item.done = make(chan error, 1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused = append(s.refused, queuedRefusal{item, reason})
	s.scheduleLocked(ackLinger)
	return item.done
}

// nack queues a nack; with wait, a channel of whether it was dead-lettered.
func (s *settler) nack(ackID, reason string, retryDelay time.Duration, wait bool) chan nackOutcome {
	item := queuedNack{ackID: ackID, reason: reason, retryDelay: retryDelay}
	if wait {
		item.done = make(chan nackOutcome, 1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nacks = append(s.nacks, item)
	s.scheduleLocked(ackLinger)
	return item.done
}

// extend queues an extension, sent at once after the acks queued before it.
func (s *settler) extend(ackIDs []string, seconds int64) chan extendOutcome {
	item := queuedExtend{ackIDs: ackIDs, seconds: seconds, done: make(chan extendOutcome, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.extends = append(s.extends, item)
	s.scheduleLocked(0)
	return item.done
}

func (s *settler) scheduleLocked(delay time.Duration) {
	if s.flushing {
		return // its end schedules the next for what is left
	}
	if s.timer != nil {
		if delay > 0 {
			return
		}
		s.timer.Stop()
	}
	s.timer = time.AfterFunc(delay, s.fire)
}

func (s *settler) fire() {
	s.mu.Lock()
	s.timer = nil
	s.flushing = true
	s.mu.Unlock()
	s.flush(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushing = false
	switch {
	case len(s.extends) > 0 || s.urgent(len(s.acks)):
		s.scheduleLocked(0)
	case s.pendingLocked() > 0:
		s.scheduleLocked(ackLinger)
	}
}

// flush sends everything queued now (after the flush in flight, if any).
func (s *settler) flush(paced bool) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if wait := time.Until(s.lastStart.Add(minSettleInterval)); paced && wait > 0 {
		time.Sleep(wait) // what is queued meanwhile goes in this flush too
	}
	s.mu.Lock()
	if s.pendingLocked() == 0 {
		s.mu.Unlock()
		return
	}
	acks, refused, nacks, extends := s.acks, s.refused, s.nacks, s.extends
	s.acks, s.refused, s.nacks, s.extends = nil, nil, nil, nil
	s.mu.Unlock()
	s.lastStart = time.Now()
	s.sendAcks(acks, refused)
	s.sendNacks(nacks)
	s.sendExtends(extends)
}

// close sends what is queued and stops the timer.
func (s *settler) close() {
	s.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.mu.Unlock()
	s.flush(false)
}

func (s *settler) sendAcks(acks []queuedAck, refused []queuedRefusal) {
	var refusals [][2]string
	for _, r := range refused {
		refusals = append(refusals, [2]string{r.ack.ackID, r.reason})
		answer(r.ack.done, rejection([][2]string{{r.ack.ackID, r.reason}}, 1))
	}
	for first := 0; first < len(acks); first += maxSettleIDs {
		refusals = append(refusals, s.sendAckChunk(acks[first:min(first+maxSettleIDs, len(acks))])...)
	}
	if len(refusals) > 0 {
		s.report(rejection(refusals, len(acks)+len(refused)))
	}
}

func (s *settler) sendAckChunk(chunk []queuedAck) [][2]string {
	seen := map[string]bool{}
	ids := make([]string, 0, len(chunk))
	for _, item := range chunk {
		if !seen[item.ackID] {
			seen[item.ackID] = true
			ids = append(ids, item.ackID)
		}
	}
	var out struct {
		Rejected []AckRejection `json:"rejected"`
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	err := s.t.do(ctx, call{method: "POST", path: s.path("ack"), body: map[string]any{"ackIds": ids}, idempotent: true}, &out)
	rejected := out.Rejected
	var apiErr *Error
	if errors.As(err, &apiErr) && apiErr.Code == "ACK_REJECTED" {
		rejected, err = apiErr.Rejected(), nil
	}
	if err != nil {
		for _, item := range chunk {
			answer(item.done, err)
		}
		s.report(err)
		return nil
	}
	reasons := map[string]string{}
	var refusals [][2]string
	for _, r := range rejected {
		reasons[r.AckID] = r.Reason
		refusals = append(refusals, [2]string{r.AckID, r.Reason})
	}
	for _, item := range chunk {
		if reason, refused := reasons[item.ackID]; refused {
			answer(item.done, rejection([][2]string{{item.ackID, reason}}, 1))
		} else {
			answer(item.done, nil)
		}
	}
	return refusals
}

func (s *settler) sendNacks(nacks []queuedNack) {
	for first := 0; first < len(nacks); first += maxSettleIDs {
		chunk := nacks[first:min(first+maxSettleIDs, len(nacks))]
		wire := make([]map[string]any, len(chunk))
		for i, item := range chunk {
			wire[i] = map[string]any{"ackId": item.ackID, "error": item.reason}
			if item.retryDelay > 0 {
				wire[i]["retryDelay"] = durationMs(item.retryDelay)
			}
		}
		var out struct {
			Nacked []struct {
				AckID        string `json:"ackId"`
				DeadLettered bool   `json:"deadLettered"`
			} `json:"nacked"`
			Rejected []AckRejection `json:"rejected"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		// Not retried after a lost answer: a repeated nack is refused, its lease having ended.
		err := s.t.do(ctx, call{method: "POST", path: s.path("nack"), body: map[string]any{"nacks": wire}}, &out)
		cancel()
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Code == "ACK_REJECTED" {
			out.Rejected, err = apiErr.Rejected(), nil
		}
		if err != nil {
			for _, item := range chunk {
				if item.done != nil {
					item.done <- nackOutcome{err: err}
				}
			}
			s.report(err)
			continue
		}
		dead := map[string]bool{}
		for _, n := range out.Nacked {
			dead[n.AckID] = n.DeadLettered
		}
		reasons := map[string]string{}
		var refusals [][2]string
		for _, r := range out.Rejected {
			reasons[r.AckID] = r.Reason
			refusals = append(refusals, [2]string{r.AckID, r.Reason})
		}
		for _, item := range chunk {
			if item.done == nil {
				continue
			}
			if d, ok := dead[item.ackID]; ok {
				item.done <- nackOutcome{dead: d}
			} else {
				item.done <- nackOutcome{err: rejection([][2]string{{item.ackID, reasons[item.ackID]}}, 1)}
			}
		}
		if len(refusals) > 0 {
			s.report(rejection(refusals, len(chunk)))
		}
	}
}

func (s *settler) sendExtends(extends []queuedExtend) {
	for _, item := range extends {
		var extended []string
		var err error
		for first := 0; first < len(item.ackIDs) && err == nil; first += maxSettleIDs {
			var out struct {
				Extended []string `json:"extended"`
			}
			ids := item.ackIDs[first:min(first+maxSettleIDs, len(item.ackIDs))]
			ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
			body := map[string]any{"ackIds": ids, "seconds": item.seconds}
			err = s.t.do(ctx, call{method: "POST", path: s.path("extend"), body: body, idempotent: true}, &out)
			cancel()
			extended = append(extended, out.Extended...)
		}
		item.done <- extendOutcome{extended: extended, err: err}
	}
}

func answer(done chan error, err error) {
	if done != nil {
		done <- err
	}
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// --- the consumer's side ------------------------------------------------------------------

func (cs *Consumer) queueAck(m *Message, wait bool) chan error {
	stale := cs.settle(m)
	if stale {
		return cs.settler.refuse(m.AckID, staleSettle, wait)
	}
	return cs.settler.ack(m.AckID, wait)
}

func (cs *Consumer) queueNack(m *Message, reason string, retryDelay time.Duration, wait bool) chan nackOutcome {
	if cs.settle(m) {
		refused := cs.settler.refuse(m.AckID, staleSettle, wait)
		if refused == nil {
			return nil
		}
		out := make(chan nackOutcome, 1)
		go func() { out <- nackOutcome{err: <-refused} }()
		return out
	}
	return cs.settler.nack(m.AckID, reason, retryDelay, wait)
}

// settle marks m settled and no longer held; whether its lease is known to have ended
// (exactly-once: its ack or nack is then not sent).
func (cs *Consumer) settle(m *Message) bool {
	h := cs.holdings
	h.mu.Lock()
	stale := h.exactlyOnce && !h.usableLocked(m)
	h.releaseLocked(m)
	h.mu.Unlock()
	m.settled.Store(true)
	return stale
}

func (cs *Consumer) urgent(queuedAcks int) bool {
	cs.holdings.mu.Lock()
	defer cs.holdings.mu.Unlock()
	half := cs.holdings.window / 2
	if half < 1 {
		half = 1
	}
	return queuedAcks >= half
}

func (cs *Consumer) reportLost(count int, why string) {
	text := fmt.Sprintf("%d message(s) dropped, %s; the group delivers them again", count, why)
	cs.report(&Error{Code: "LEASE_EXPIRED", Message: text})
}

// narrow sets the member's window now (the bytes held went over their bound, or back under).
func (cs *Consumer) narrow(window int) {
	if cs.memberID() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	if err := cs.heartbeat(ctx, cs.memberID(), window); err != nil {
		cs.report(err)
	}
}
