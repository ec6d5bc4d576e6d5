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
	staleSettle       = "its lease had ended before the ack or nack (the message is delivered again)"
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
	BatchSize      int           // messages leased per pull at most (default 10)
	Wait           time.Duration // how long a pull waits for a message (default 10s)
	Concurrency    int           // handlers running at once (default 1: one at a time, in order)
	FlowControl    FlowControl   // what the consumer holds at most (default 10 per handler)
	ClientID       string        // shown in Describe (default host:pid)
	OnEvent        func(Event)   // connection events; called on the consumer's goroutines
	OnError        func(error)   // errors the consumer survives; default: the client's logger
}

// Handler processes one message. A returned error nacks the message with its text unless
// the handler settled it; returning nil without Ack lets it go: it is delivered again after
// its lease ends.
type Handler func(ctx context.Context, msg *Message) error

// Consume makes a consumer of topic in group; it joins on Run or Start.
func (c *Client) Consume(ctx context.Context, topic, group string, opts ConsumeOptions) (*Consumer, error) {
	if opts.BatchSize == 0 {
		opts.BatchSize = DefaultBatchSize
	}
	if opts.Wait == 0 {
		opts.Wait = DefaultWait
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 1
	}
	if opts.BatchSize < 1 || opts.BatchSize > MaxBatchSize || opts.Wait < 0 || opts.Wait > MaxWait || opts.Concurrency < 1 {
		return nil, fmt.Errorf("queuecore: BatchSize must be 1..%d, Wait 0..%s and Concurrency at least 1", MaxBatchSize, MaxWait)
	}
	window := opts.FlowControl.MaxMessages
	if window == 0 {
		window = PrefetchPerHandler * opts.Concurrency
	}
	if window < 1 || window > 100000 {
		return nil, errors.New("queuecore: FlowControl.MaxMessages must be 1..100000")
	}
	if opts.ClientID == "" {
		host, _ := os.Hostname()
		opts.ClientID = fmt.Sprintf("%s:%d", host, os.Getpid())
	}
	settings := GroupSettings{
		StartFrom: opts.StartFrom, AckTimeout: opts.AckTimeout, MaxInFlight: opts.MaxInFlight, DeadLetter: opts.DeadLetter,
	}
	if settings != (GroupSettings{}) {
		if _, err := c.ConsumerGroups.Configure(ctx, topic, group, settings); err != nil {
			return nil, err
		}
	}
	cs := &Consumer{
		t: c.transport, topic: topic, group: group, opts: opts, logger: c.logger, warn: c.warn,
		pull: opts.Pull, window: window, stop: make(chan struct{}), done: make(chan struct{}),
		arrived: make(chan struct{}, 1),
	}
	cs.settler = &settler{t: c.transport, path: cs.path, report: cs.report, urgent: cs.urgent}
	cs.holdings = newHoldings(window, opts.FlowControl, cs.settler)
	cs.holdings.lost = cs.reportLost
	cs.holdings.setWindow = cs.narrow
	return cs, nil
}

// Consumer is a member of a consumer group.
type Consumer struct {
	t        *transport
	topic    string
	group    string
	opts     ConsumeOptions
	logger   Logger
	warn     Logger
	window   int
	settler  *settler
	holdings *holdings

	mu           sync.Mutex
	membership   *Membership
	left         bool
	running      bool
	buffer       []*Message
	serverWindow int

	arrived   chan struct{} // a message was buffered
	pull      bool          // set when the stream is not available
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

// Held is how many messages the consumer holds: received and not settled yet.
func (cs *Consumer) Held() int { return cs.holdings.count() }

// Join joins the group (once), with the consumer's window.
func (cs *Consumer) Join(ctx context.Context) (*Membership, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.membership == nil {
		joined, err := cs.joinRequest(ctx, "")
		if err != nil {
			return nil, err
		}
		cs.membership = joined
		cs.serverWindow = cs.window
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

// Stop lets the handlers running finish, sends the acks pending, leaves the group and waits
// (up to ctx) for the end. Leaving hands this member's partitions and unsettled messages to the
// others at once. A handler that wants to stop its consumer calls Stop on a new goroutine (or
// cancels the context): Stop waits for the handler to return.
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

// Ack acks many messages and waits for the verdicts; it returns those refused.
func (cs *Consumer) Ack(ctx context.Context, messages []*Message) ([]*Message, error) {
	verdicts := make([]chan error, len(messages))
	for i, m := range messages {
		verdicts[i] = cs.queueAck(m, true)
	}
	var refused []*Message
	for i, verdict := range verdicts {
		select {
		case err := <-verdict:
			if errors.Is(err, ErrAckRejected) {
				refused = append(refused, messages[i])
			} else if err != nil {
				return nil, err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return refused, nil
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
	var background sync.WaitGroup
	background.Add(3)
	go func() { defer background.Done(); cs.heartbeatLoop(recvCtx) }()
	go func() { defer background.Done(); cs.holdings.keep(recvCtx, cs.report) }()
	fatal := make(chan error, 1)
	go func() { defer background.Done(); fatal <- cs.intake(recvCtx) }()
	err := cs.dispatch(recvCtx, ctx, handler, fatal)
	cancel()
	cs.settler.close()
	background.Wait()
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

// dispatch hands buffered messages to handler, Concurrency at once (in order when 1), until
// stopped; handlers run with the caller's ctx so that Stop lets them finish.
func (cs *Consumer) dispatch(recvCtx, handlerCtx context.Context, handler Handler, fatal chan error) error {
	slots := make(chan struct{}, cs.opts.Concurrency)
	var handlers sync.WaitGroup
	defer handlers.Wait()
	for {
		// A free handler first, then the message: one whose lease ended while the handlers
		// were busy is dropped by next, never handed out.
		select {
		case slots <- struct{}{}:
		case <-recvCtx.Done():
		}
		msg, err := cs.next(recvCtx, fatal)
		if err != nil {
			return err
		}
		if msg == nil {
			select {
			case <-cs.stop:
				return nil
			default:
				return handlerCtx.Err()
			}
		}
		if recvCtx.Err() != nil { // stopping: what is still buffered is let go
			cs.holdings.release(msg)
			continue
		}
		handlers.Add(1)
		go func(m *Message) {
			defer handlers.Done()
			defer func() { <-slots }()
			cs.handle(handlerCtx, handler, m)
		}(msg)
	}
}

// next is the next message to hand out, nil once stopped, or the fatal intake error.
func (cs *Consumer) next(ctx context.Context, fatal chan error) (*Message, error) {
	dropped := 0
	for {
		cs.mu.Lock()
		var msg *Message
		if len(cs.buffer) > 0 {
			msg, cs.buffer = cs.buffer[0], cs.buffer[1:]
		}
		member := ""
		if cs.membership != nil {
			member = cs.membership.MemberID
		}
		cs.mu.Unlock()
		if msg != nil {
			if msg.memberID == member && cs.holdings.usable(msg) {
				if dropped > 0 {
					cs.reportLost(dropped, "their leases ended while buffered")
				}
				return msg, nil
			}
			cs.holdings.release(msg)
			if msg.memberID == member {
				dropped++
			}
			continue
		}
		select {
		case <-cs.arrived:
		case err := <-fatal:
			if err != nil {
				return nil, err
			}
			<-ctx.Done()
			return nil, nil
		case <-ctx.Done():
			return nil, nil
		}
	}
}

// handle runs handler: an error nacks the message, a return without settling lets it go.
func (cs *Consumer) handle(ctx context.Context, handler Handler, msg *Message) {
	err := handler(ctx, msg)
	if err == nil {
		if !msg.Settled() {
			cs.holdings.release(msg) // no longer kept: delivered again after its lease ends
		}
		return
	}
	cs.report(err)
	if !msg.Settled() {
		reason := err.Error()
		if len(reason) > 4096 {
			reason = reason[:4096]
		}
		cs.queueNack(msg, reason, 0, false)
	}
}

// intake receives into the buffer until ctx ends; it returns the error that stops the consumer.
func (cs *Consumer) intake(ctx context.Context) error {
	for ctx.Err() == nil {
		err := cs.receive(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err = cs.recover(ctx, err); err != nil {
			return err
		}
	}
	return nil
}

func (cs *Consumer) receive(ctx context.Context) error {
	if cs.recheck {
		// A reconnect first asks whether the member survived the outage: a member silent past
		// its session is evicted by its heartbeat's rebalance and rejoins before receiving.
		if err := cs.heartbeat(ctx, cs.memberID(), 0); err != nil {
			return err
		}
		cs.recheck = false
	}
	if cs.pull {
		return cs.pullOnce(ctx)
	}
	return cs.streamOnce(ctx)
}

// arrive holds a delivered message (its lease kept from now on) and buffers it.
func (cs *Consumer) arrive(raw []byte, member string) error {
	msg, err := decodeMessage(raw, cs, member)
	if err != nil {
		return err
	}
	cs.holdings.add(msg, len(raw))
	cs.mu.Lock()
	cs.buffer = append(cs.buffer, msg)
	cs.mu.Unlock()
	select {
	case cs.arrived <- struct{}{}:
	default:
	}
	return nil
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

func (cs *Consumer) pullOnce(ctx context.Context) error {
	cs.holdings.waitRoom(ctx)
	free := cs.holdings.free()
	if ctx.Err() != nil || free == 0 {
		return nil
	}
	member := cs.memberID()
	var out struct {
		Messages []jsonRaw `json:"messages"`
	}
	want := cs.opts.BatchSize
	if free < want {
		want = free
	}
	body := map[string]any{"maxMessages": want, "waitMs": cs.opts.Wait.Milliseconds()}
	cs.mu.Lock()
	if cs.serverWindow != cs.window {
		body["maxInFlight"] = cs.window
	}
	cs.mu.Unlock()
	c := call{method: "POST", path: cs.path("members", member, "pull"), body: body, timeout: cs.t.timeout + cs.opts.Wait}
	if err := cs.t.do(ctx, c, &out); err != nil {
		return err
	}
	cs.mu.Lock()
	cs.serverWindow = cs.window
	cs.mu.Unlock()
	cs.connectedNow()
	for _, raw := range out.Messages {
		if err := cs.arrive(raw, member); err != nil {
			return err
		}
	}
	return nil
}

// --- helpers -----------------------------------------------------------------------------

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

// report tells OnError about an error the consumer survives; without it, one line to the
// client's logger (by default standard error).
func (cs *Consumer) report(err error) {
	if cs.opts.OnError != nil {
		cs.opts.OnError(err)
		return
	}
	if cs.warn != nil {
		cs.warn.Printf("queuecore consumer %s/%s: %v", cs.topic, cs.group, err)
	}
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
