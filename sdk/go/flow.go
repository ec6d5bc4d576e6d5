package queuecore

import (
	"context"
	"math"
	"sync"
	"time"
)

// FlowControl bounds what one consumer holds and how long it keeps a lease. MaxMessages is the
// most messages received and not settled at once (default 10 per handler, Concurrency): the
// server never leases the member more (its window). MaxBytes bounds their encoded size (default
// 100 MiB). A held message's lease is extended until MaxLeaseExtension after it arrived (default
// 60 minutes).
type FlowControl struct {
	MaxMessages       int
	MaxBytes          int
	MaxLeaseExtension time.Duration
}

// PrefetchPerHandler is how many messages a consumer holds per handler when
// FlowControl.MaxMessages is zero.
const PrefetchPerHandler = 10

const (
	leaseSafety  = 250 * time.Millisecond // a lease this close to its end counts as ended
	minLeaseTick = 50 * time.Millisecond
	maxLeaseTick = 5 * time.Second

	minExtensionSeconds = 10
)

// holdings are the messages a consumer holds (received, not settled): flow control and the
// keeping of their leases.
//
// The consumer asks the server for no more than fits: the member's window is the server's bound,
// and MaxBytes is kept by narrowing that window while the held messages are too large. While a
// message is held its lease is extended before it expires, in one request for all that are due
// (after the acks queued before), up to MaxLeaseExtension after its arrival. On an exactly-once
// topic a message whose lease ended is never handed out and its ack or nack is not sent.
type holdings struct {
	settler   *settler
	lost      func(count int, why string)
	setWindow func(window int)

	mu           sync.Mutex
	held         map[string]*Message
	bytes        int
	window       int
	maxBytes     int
	maxExtension time.Duration
	ackTimeout   time.Duration
	exactlyOnce  bool
	narrowed     bool
	room         chan struct{} // closed when a message fits again
}

func newHoldings(window int, flow FlowControl, s *settler) *holdings {
	if flow.MaxBytes <= 0 {
		flow.MaxBytes = 100 << 20
	}
	if flow.MaxLeaseExtension <= 0 {
		flow.MaxLeaseExtension = time.Hour
	}
	return &holdings{
		settler: s, held: map[string]*Message{}, window: window, maxBytes: flow.MaxBytes,
		maxExtension: flow.MaxLeaseExtension, ackTimeout: 30 * time.Second, exactlyOnce: true,
		room: make(chan struct{}),
	}
}

// joined takes what a join answered: the lease length, the delivery and the window.
func (h *holdings) joined(m *Membership, window int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if m.AckTimeoutMs > 0 {
		h.ackTimeout = time.Duration(m.AckTimeoutMs) * time.Millisecond
	}
	h.exactlyOnce = m.Delivery == "" || m.Delivery == "exactly-once"
	h.window = window
	if m.MaxInFlight > 0 && m.MaxInFlight < window {
		h.window = m.MaxInFlight
	}
	h.changedLocked()
}

func (h *holdings) setAckTimeout(d time.Duration) {
	h.mu.Lock()
	h.ackTimeout = d
	h.mu.Unlock()
}

func (h *holdings) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held)
}

// free is how many more messages fit (0 while the bytes are over their bound).
func (h *holdings) free() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.freeLocked()
}

func (h *holdings) freeLocked() int {
	if h.bytes >= h.maxBytes || len(h.held) >= h.window {
		return 0
	}
	return h.window - len(h.held)
}

// waitRoom returns once a message fits, or ctx ends.
func (h *holdings) waitRoom(ctx context.Context) {
	h.mu.Lock()
	room := h.room
	h.mu.Unlock()
	select {
	case <-room:
	case <-ctx.Done():
	}
}

// add holds an arrived message, leased for the ack timeout from now.
func (h *holdings) add(m *Message, size int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	m.size, m.arrived, m.deadline = size, now, now.Add(h.ackTimeout)
	h.held[m.AckID] = m
	h.bytes += size
	h.changedLocked()
}

// release stops holding a message (settled or dropped).
func (h *holdings) release(m *Message) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releaseLocked(m)
}

func (h *holdings) releaseLocked(m *Message) {
	if h.held[m.AckID] != m {
		return
	}
	delete(h.held, m.AckID)
	h.bytes -= m.size
	h.changedLocked()
}

// releaseAll forgets everything held: the member is gone and its leases ended with it.
func (h *holdings) releaseAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, m := range h.held {
		m.lost = true
		h.releaseLocked(m)
	}
}

// usable reports whether m may still be handed out or settled.
func (h *holdings) usable(m *Message) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.usableLocked(m)
}

func (h *holdings) usableLocked(m *Message) bool {
	if m.lost {
		return false
	}
	return !h.exactlyOnce || time.Now().Before(m.deadline.Add(-leaseSafety))
}

func (h *holdings) changedLocked() {
	if h.freeLocked() > 0 {
		select {
		case <-h.room:
		default:
			close(h.room)
		}
	} else {
		select {
		case <-h.room:
			h.room = make(chan struct{})
		default:
		}
	}
	over := h.bytes >= h.maxBytes
	if over != h.narrowed && h.setWindow != nil {
		h.narrowed = over // the bytes bound: the server's window follows what is held
		window := h.window
		if over {
			window = len(h.held)
			if window < 1 {
				window = 1
			}
		}
		go h.setWindow(window)
	}
}

func (h *holdings) tick() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	tick := h.ackTimeout / 4
	if tick < minLeaseTick {
		tick = minLeaseTick
	}
	if tick > maxLeaseTick {
		tick = maxLeaseTick
	}
	return tick
}

// keep extends the leases of held messages before they end, until ctx ends.
func (h *holdings) keep(ctx context.Context, report func(error)) {
	for sleep(ctx, h.tick()) {
		if err := h.extendDue(); err != nil && ctx.Err() == nil {
			report(err) // the next tick tries again
		}
	}
}

// extensionSeconds is how long each extension leases a held message: the ack timeout, at least
// 10 s, so that a short ack timeout does not make the keeper race the clock. h.mu held.
func (h *holdings) extensionSeconds() int64 {
	seconds := int64(math.Ceil(h.ackTimeout.Seconds()))
	if seconds < minExtensionSeconds {
		seconds = minExtensionSeconds
	}
	return seconds
}

// extendDue sends one extension for every held message whose lease ends within half an extension.
func (h *holdings) extendDue() error {
	h.mu.Lock()
	now := time.Now()
	seconds := h.extensionSeconds()
	half := time.Duration(seconds) * time.Second / 2 // a short ack timeout: at the first look
	if soon := h.ackTimeout * 3 / 4; soon > half {
		half = soon
	}
	var due, ended []*Message
	for _, m := range h.held {
		if m.lost || m.deadline.After(now.Add(half)) {
			continue
		}
		if now.Sub(m.arrived) >= h.maxExtension || !m.deadline.After(now) {
			ended = append(ended, m)
		} else {
			due = append(due, m)
		}
	}
	exactlyOnce := h.exactlyOnce
	h.mu.Unlock()
	if len(ended) > 0 && exactlyOnce {
		h.lose(ended, "its lease ended before it was settled")
	}
	byLength := map[int64][]*Message{} // never leased past arrival + MaxLeaseExtension
	for _, m := range due {
		length := int64(math.Ceil(m.arrived.Add(h.maxExtension).Sub(now).Seconds()))
		if length < 1 {
			length = 1
		}
		if length > seconds {
			length = seconds
		}
		byLength[length] = append(byLength[length], m)
	}
	for length, messages := range byLength {
		if _, err := h.extend(messages, length); err != nil {
			return err
		}
	}
	return nil
}

// extend extends these leases by seconds from now; the ack ids extended.
func (h *holdings) extend(messages []*Message, seconds int64) ([]string, error) {
	h.mu.Lock()
	chosen := make([]*Message, 0, len(messages))
	ids := make([]string, 0, len(messages))
	for _, m := range messages {
		if !m.lost {
			chosen = append(chosen, m)
			ids = append(ids, m.AckID)
		}
	}
	h.mu.Unlock()
	if len(chosen) == 0 {
		return nil, nil
	}
	h.settler.flush(false) // the acks queued before go first: no split range leases
	sentAt := time.Now()
	outcome := <-h.settler.extend(ids, seconds)
	if outcome.err != nil {
		return nil, outcome.err
	}
	granted := map[string]bool{}
	for _, id := range outcome.extended {
		granted[id] = true
	}
	h.mu.Lock()
	var refused []*Message
	for _, m := range chosen {
		if granted[m.AckID] {
			m.deadline = sentAt.Add(time.Duration(seconds) * time.Second)
		} else if h.held[m.AckID] == m {
			refused = append(refused, m)
		}
	}
	exactlyOnce := h.exactlyOnce
	h.mu.Unlock()
	if len(refused) > 0 && exactlyOnce {
		h.lose(refused, "the server refused to extend its lease")
	}
	return outcome.extended, nil
}

// lose drops messages whose leases ended: the server no longer counts them, nor does the window.
func (h *holdings) lose(messages []*Message, why string) {
	h.mu.Lock()
	for _, m := range messages {
		m.lost = true
		h.releaseLocked(m)
	}
	h.mu.Unlock()
	if h.lost != nil {
		h.lost(len(messages), why)
	}
}
