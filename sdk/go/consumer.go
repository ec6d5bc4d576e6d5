package queuecore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Consumer tuning limits and defaults.
const (
	DefaultBatchSize  = 10
	DefaultWait       = 10 * time.Second
	MaxBatchSize      = 1000             // the API's maxMessages per pull
	MaxWait           = 30 * time.Second // the API's longest long-poll
	streamIdleTimeout = 45 * time.Second // the server writes at least every 15s on an idle stream
	leaveTimeout      = 10 * time.Second
)

// EventKind names a change of a consumer's connection or membership.
type EventKind string

// The connection events a consumer reports through ConsumeOptions.OnEvent.
const (
	EventConnected    EventKind = "connected"    // a stream opened or a pull answered
	EventDisconnected EventKind = "disconnected" // the stream broke or a pull failed
	EventReconnecting EventKind = "reconnecting" // about to try again after a backoff
	EventRebalanced   EventKind = "rebalanced"   // a new generation or member id, new partitions
)

// Event is one connection or membership change.
type Event struct {
	Kind         EventKind
	MemberID     string
	GenerationID int64
	Partitions   []int
	Err          error // why, for disconnected and reconnecting
}

// ConsumeOptions configure a consumer. StartFrom, AckTimeout, MaxInFlight and DeadLetter
// configure the group first (admin scope; zero values keep the group's settings).
type ConsumeOptions struct {
	StartFrom      string // "earliest" or "latest"
	AckTimeout     time.Duration
	MaxInFlight    int
	DeadLetter     *DeadLetterPolicy
	SessionTimeout time.Duration // this member's own
	Pull           bool          // long-poll instead of Server-Sent Events (the fallback otherwise)
	BatchSize      int           // messages leased per pull (default 10)
	Wait           time.Duration // how long a pull waits for a message (default 10s)
	ClientID       string        // shown in Describe (default host:pid)
	OnEvent        func(Event)   // connection events; called on the consumer's goroutines
	OnError        func(error)   // errors the consumer survives; default: the client's logger
}

// Handler processes one message. A returned error nacks the message with its text unless
// the handler settled it; returning nil without Ack leaves it to be delivered again after
// the ack timeout.
type Handler func(ctx context.Context, msg *Message) error

// Consume makes a consumer of topic in group; it joins on Run or Start.
func (c *Client) Consume(ctx context.Context, topic, group string, opts ConsumeOptions) (*Consumer, error) {
	if opts.BatchSize == 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.Wait == 0 {
		opts.Wait = DefaultWait
	}
	if opts.BatchSize < 1 || opts.BatchSize > MaxBatchSize || opts.Wait < 0 || opts.Wait > MaxWait {
		return nil, fmt.Errorf("queuecore: BatchSize must be 1..%d and Wait 0..%s", MaxBatchSize, MaxWait)
	}
	if opts.ClientID == "" {
		host, _ := os.Hostname()
		opts.ClientID = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	settings := GroupSettings{opts.StartFrom, opts.AckTimeout, opts.MaxInFlight, 0, opts.DeadLetter}
	if settings != (GroupSettings{}) {
		if _, err := c.Groups.Configure(ctx, topic, group, settings); err != nil {
			return nil, err
		}
	}
	return &Consumer{
		t: c.transport, topic: topic, group: group, opts: opts, logger: c.logger,
		pull: opts.Pull, stop: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// Consumer is a member of a consumer group.
type Consumer struct {
	t      *transport
	topic  string
	group  string
	opts   ConsumeOptions
	logger Logger

	mu         sync.Mutex
	membership *Membership
	left       bool
	running    bool

	pull      bool // set when the stream is not available
	connected bool
	recheck   bool // after a failure: heartbeat before receiving, to learn of a rejoin first
	failures  int
	stopOnce  sync.Once
	doneOnce  sync.Once
	stop      chan struct{}
	done      chan struct{}
	err       error
}

// Membership is the consumer's current identity (nil before joining).
func (cs *Consumer) Membership() *Membership {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.membership == nil {
		return nil
	}
	copied := *cs.membership
	return &copied
}

// Join joins the group (once).
func (cs *Consumer) Join(ctx context.Context) (*Membership, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.membership == nil {
		joined, err := cs.joinRequest(ctx, "")
		if err != nil {
			return nil, err
		}
		cs.membership = joined
	}
	return cs.membership, nil
}

// Run joins and delivers every message to handler until Stop or ctx ends, then leaves the
// group. It returns nil after Stop, ctx's error after cancellation, or the fatal API error.
func (cs *Consumer) Run(ctx context.Context, handler Handler) error {
	if err := cs.begin(ctx); err != nil {
		return err
	}
	return cs.serve(ctx, handler)
}

// Start joins now, then runs handler on a goroutine; see Wait and Stop.
func (cs *Consumer) Start(ctx context.Context, handler Handler) error {
	if err := cs.begin(ctx); err != nil {
		return err
	}
	go func() { _ = cs.serve(ctx, handler) }()
	return nil
}

// Wait blocks until a started consumer ends and returns what Run would have.
func (cs *Consumer) Wait() error {
	<-cs.done
	return cs.err
}

// Stop lets the message in hand finish, leaves the group and waits (up to ctx) for the end.
// Leaving hands this member's partitions and unsettled messages to the others at once.
// A handler that wants to stop its consumer calls Stop on a new goroutine (or cancels the
// context): Stop waits for the handler to return.
func (cs *Consumer) Stop(ctx context.Context) error {
	cs.stopOnce.Do(func() { close(cs.stop) })
	cs.mu.Lock()
	running := cs.running
	cs.mu.Unlock()
	if !running {
		cs.finish(nil) // never started: leave if joined, and let Wait return
		return nil
	}
	select {
	case <-cs.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close is Stop with a 30 second bound.
func (cs *Consumer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return cs.Stop(ctx)
}

func (cs *Consumer) begin(ctx context.Context) error {
	cs.mu.Lock()
	if cs.running || cs.left {
		cs.mu.Unlock()
		return errors.New("queuecore: a consumer runs once; make a new one")
	}
	cs.running = true
	cs.mu.Unlock()
	if _, err := cs.Join(ctx); err != nil {
		cs.finish(err)
		return err
	}
	return nil
}

func (cs *Consumer) serve(ctx context.Context, handler Handler) error {
	recvCtx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-cs.stop:
			cancel()
		case <-recvCtx.Done():
		}
	}()
	beats := make(chan struct{})
	go cs.heartbeatLoop(recvCtx, beats)
	err := cs.loop(recvCtx, ctx, handler)
	cancel()
	<-beats
	cs.leave()
	if err != nil && ctx.Err() == nil && cs.opts.OnError != nil {
		cs.opts.OnError(err)
	}
	cs.finish(err)
	return err
}

func (cs *Consumer) finish(err error) {
	cs.doneOnce.Do(func() {
		cs.err = err
		cs.leave()
		cs.stopOnce.Do(func() { close(cs.stop) })
		close(cs.done)
	})
}

// loop receives until stopped; handlers run with the caller's ctx so Stop lets them finish.
func (cs *Consumer) loop(recvCtx, handlerCtx context.Context, handler Handler) error {
	for {
		err := cs.receive(recvCtx, handlerCtx, handler)
		if recvCtx.Err() != nil {
			select {
			case <-cs.stop:
				return nil
			default:
				return handlerCtx.Err()
			}
		}
		if err = cs.recover(recvCtx, err); err != nil {
			return err
		}
	}
}

func (cs *Consumer) receive(recvCtx, handlerCtx context.Context, handler Handler) error {
	if cs.recheck {
		// A reconnect first asks whether the member survived the outage: a member silent past
		// its session is evicted by its heartbeat's rebalance and rejoins before receiving.
		if err := cs.heartbeat(recvCtx, cs.memberID()); err != nil {
			return err
		}
		cs.recheck = false
	}
	if cs.pull {
		return cs.pullOnce(recvCtx, handlerCtx, handler)
	}
	return cs.streamOnce(recvCtx, handlerCtx, handler)
}

// recover rejoins when the member is gone, falls back to pull when streaming is not
// available, backs off on transient errors and returns the rest.
func (cs *Consumer) recover(ctx context.Context, err error) error {
	if err == nil {
		cs.failures = 0
		return nil
	}
	var apiErr *Error
	isAPI := errors.As(err, &apiErr)
	switch {
	case isAPI && apiErr.Code == "MEMBER_NOT_FOUND":
		return cs.rejoinQuietly(ctx, cs.memberID())
	case !cs.pull && streamUnsupported(err):
		cs.logf("queuecore consumer %s/%s: no event stream (%v); pulling instead", cs.topic, cs.group, err)
		cs.pull = true
		return nil
	case isAPI && !apiErr.Transient():
		return err
	}
	cs.disconnected(err)
	cs.recheck = true
	cs.failures++
	if cs.failures > 4 {
		cs.failures = 4
	}
	cs.emit(Event{Kind: EventReconnecting, MemberID: cs.memberID(), Err: err})
	sleep(ctx, backoff(cs.failures))
	return nil
}

func (cs *Consumer) rejoinQuietly(ctx context.Context, lost string) error {
	err := cs.rejoin(ctx, lost)
	var apiErr *Error
	if err != nil && (!errors.As(err, &apiErr) || apiErr.Transient()) {
		cs.report(err)
		sleep(ctx, backoff(1))
		return nil
	}
	return err
}

func (cs *Consumer) pullOnce(recvCtx, handlerCtx context.Context, handler Handler) error {
	member := cs.memberID()
	var out struct {
		Messages []jsonRaw `json:"messages"`
	}
	body := map[string]any{"maxMessages": cs.opts.BatchSize, "waitMs": cs.opts.Wait.Milliseconds()}
	c := call{method: "POST", path: cs.path("members", member, "pull"), body: body, timeout: cs.t.timeout + cs.opts.Wait}
	if err := cs.t.do(recvCtx, c, &out); err != nil {
		return err
	}
	cs.connectedNow()
	for _, raw := range out.Messages {
		if err := cs.deliver(handlerCtx, handler, raw, member); err != nil {
			return err
		}
		if recvCtx.Err() != nil {
			return nil
		}
	}
	return nil
}

// deliver hands one message to handler unless its member was replaced meanwhile.
func (cs *Consumer) deliver(ctx context.Context, handler Handler, raw []byte, member string) error {
	msg, err := decodeMessage(raw, cs, member)
	if err != nil {
		return err
	}
	if member != cs.memberID() {
		return nil // its lease ended with the old member; the group delivers it again
	}
	if err := handler(ctx, msg); err != nil {
		cs.report(err)
		if !msg.Settled() {
			cs.nackQuietly(ctx, msg, err)
		}
	}
	return nil
}

func (cs *Consumer) nackQuietly(ctx context.Context, msg *Message, cause error) {
	reason := cause.Error()
	if len(reason) > 4096 {
		reason = reason[:4096]
	}
	if _, err := msg.Nack(ctx, reason); err != nil {
		cs.report(err)
	}
}

// AckIDs acks many leases in one request: the acked ids, and a 409 *Error when none was.
func (cs *Consumer) AckIDs(ctx context.Context, ackIDs []string) ([]string, error) {
	var out struct {
		Acked []string `json:"acked"`
	}
	body := map[string]any{"ackIds": ackIDs}
	err := cs.t.do(ctx, call{method: "POST", path: cs.path("ack"), body: body, idempotent: true}, &out)
	return out.Acked, err
}

// Ack acks many messages in one request; it returns those refused (lease expired or superseded).
func (cs *Consumer) Ack(ctx context.Context, messages []*Message) ([]*Message, error) {
	byID := make(map[string]*Message, len(messages))
	ids := make([]string, 0, len(messages))
	for _, m := range messages {
		byID[m.AckID] = m
		ids = append(ids, m.AckID)
	}
	acked, err := cs.AckIDs(ctx, ids)
	var apiErr *Error
	if errors.As(err, &apiErr) && apiErr.Code == "ACK_REJECTED" {
		return messages, nil
	}
	if err != nil {
		return nil, err
	}
	for _, id := range acked {
		byID[id].settled.Store(true)
		delete(byID, id)
	}
	refused := make([]*Message, 0, len(byID))
	for _, m := range messages {
		if _, left := byID[m.AckID]; left {
			refused = append(refused, m)
		}
	}
	return refused, nil
}

// ExtendIDs keeps leases d from now; it returns the ids whose leases were extended.
func (cs *Consumer) ExtendIDs(ctx context.Context, ackIDs []string, d time.Duration) ([]string, error) {
	var out struct {
		Extended []string `json:"extended"`
	}
	body := map[string]any{"ackIds": ackIDs, "seconds": int64(d.Round(time.Second) / time.Second)}
	err := cs.t.do(ctx, call{method: "POST", path: cs.path("extend"), body: body, idempotent: true}, &out)
	return out.Extended, err
}

func (cs *Consumer) nack(ctx context.Context, ackID, reason string, retryDelay time.Duration) (bool, error) {
	body := map[string]any{"ackId": ackID, "error": reason}
	if retryDelay > 0 {
		body["retryDelay"] = durationMs(retryDelay)
	}
	var out struct {
		DeadLettered bool `json:"deadLettered"`
	}
	// Not retried after a lost answer: a repeated nack is refused, its lease having ended.
	err := cs.t.do(ctx, call{method: "POST", path: cs.path("nack"), body: body}, &out)
	return out.DeadLettered, err
}

func (cs *Consumer) path(rest ...string) string { return groupPath(cs.topic, cs.group, rest...) }

func (cs *Consumer) memberID() string {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.membership == nil {
		return ""
	}
	return cs.membership.MemberID
}

func (cs *Consumer) connectedNow() {
	cs.failures = 0
	if !cs.connected {
		cs.connected = true
		m := cs.Membership()
		cs.emit(Event{Kind: EventConnected, MemberID: m.MemberID, GenerationID: m.GenerationID, Partitions: m.Assignments})
	}
}

func (cs *Consumer) disconnected(err error) {
	cs.report(err)
	if cs.connected {
		cs.connected = false
		cs.emit(Event{Kind: EventDisconnected, MemberID: cs.memberID(), Err: err})
	}
}

func (cs *Consumer) emit(e Event) {
	if cs.opts.OnEvent != nil {
		cs.opts.OnEvent(e)
	}
}

// report tells OnError about an error the consumer survives; without it, the logger.
func (cs *Consumer) report(err error) {
	if cs.opts.OnError != nil {
		cs.opts.OnError(err)
		return
	}
	cs.logf("queuecore consumer %s/%s: %v", cs.topic, cs.group, err)
}

func (cs *Consumer) logf(format string, args ...any) {
	if cs.logger != nil {
		cs.logger.Printf(format, args...)
	}
}

func streamUnsupported(err error) bool {
	var apiErr *Error
	if errors.Is(err, errNotEventStream) {
		return true
	}
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.Status {
	case 405, 406, 501:
		return true
	case 404:
		return !strings.HasSuffix(apiErr.Code, "_NOT_FOUND") || apiErr.Code == "NOT_FOUND"
	}
	return false
}
