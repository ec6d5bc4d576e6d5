package queuecore_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

// The conformance scenarios shared by the three SDKs (../conformance/README.md).

type scenarioFile struct {
	Version   int        `json:"version"`
	Scenarios []scenario `json:"scenarios"`
}

type scenario struct {
	Name  string `json:"name"`
	Steps []step `json:"steps"`
}

type step struct {
	Op     string            `json:"op"`
	Args   map[string]any    `json:"args"`
	Expect map[string]any    `json:"expect"`
	As     string            `json:"as"`
	Save   map[string]string `json:"save"`
}

const invalidKey = "pq_live_sk_00000000000000000000000000000000"

func TestConformance(t *testing.T) {
	client := liveClient(t)
	raw, err := os.ReadFile("../conformance/scenarios.json")
	if err != nil {
		t.Fatalf("the scenario file: %v", err)
	}
	var file scenarioFile
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatalf("the scenario file: %v", err)
	}
	if len(file.Scenarios) == 0 {
		t.Fatal("the scenario file holds no scenario")
	}
	invalid, err := queuecore.New(queuecore.WithAPIKey(invalidKey), queuecore.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var developer *queuecore.Client
	if key := os.Getenv("QUEUECORE_DEVELOPER_API_KEY"); key != "" {
		developer, err = queuecore.New(queuecore.WithAPIKey(key), queuecore.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, sc := range file.Scenarios {
		sc := sc
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			r := &runner{client: client, invalid: invalid, developer: developer, run: runID(), saved: map[string]any{}}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			for i, st := range sc.Steps {
				if err := r.step(ctx, st); err != nil {
					t.Fatalf("step %d (%s): %v", i, st.Op, err)
				}
			}
		})
	}
}

type runner struct {
	client    *queuecore.Client
	invalid   *queuecore.Client
	developer *queuecore.Client
	run       string
	saved     map[string]any
}

func runID() string {
	const letters = "abcdefghijklmnopqrstuvwxyz"
	b := make([]byte, 8)
	for i := range b {
		n, _ := rand.Int(rand.Reader, big.NewInt(int64(len(letters))))
		b[i] = letters[n.Int64()]
	}
	return string(b)
}

var placeholder = regexp.MustCompile(`\$([A-Za-z0-9]+)`)

// rewrite replaces $word by word-<run> in strings and "@name" by saved values; keys are kept.
func (r *runner) rewrite(v any) any {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, "@") {
			if saved, ok := r.saved[x[1:]]; ok {
				return saved
			}
		}
		return placeholder.ReplaceAllString(x, "${1}-"+r.run)
	case []any:
		out := make([]any, len(x))
		for i, item := range x {
			out[i] = r.rewrite(item)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, item := range x {
			out[k] = r.rewrite(item)
		}
		return out
	}
	return v
}

func (r *runner) step(ctx context.Context, st step) error {
	args, _ := r.rewrite(st.Args).(map[string]any)
	expect, _ := r.rewrite(st.Expect).(map[string]any)
	client := r.client
	switch st.As {
	case "invalidKey":
		client = r.invalid
	case "developer":
		client = r.developer
		if client == nil {
			return errors.New("set QUEUECORE_DEVELOPER_API_KEY for the scenarios run as a Developer-tier key")
		}
	}
	result, err := perform(ctx, client, st.Op, args)
	if wanted, ok := expect["error"]; ok {
		var apiErr *queuecore.Error
		if !errors.As(err, &apiErr) {
			return fmt.Errorf("expected an API error, got result %v, error %v", jsonText(result), err)
		}
		got := map[string]any{"code": apiErr.Code, "message": apiErr.Message, "status": float64(apiErr.Status), "requestId": apiErr.RequestID}
		return match(wanted, got, "error")
	}
	if err != nil {
		return err
	}
	value, err := generic(result)
	if err != nil {
		return err
	}
	if err := match(expect["result"], value, "result"); err != nil {
		return fmt.Errorf("%w\nwhole result: %s", err, jsonText(value))
	}
	for name, path := range st.Save {
		if r.saved[name], err = lookup(value, path); err != nil {
			return err
		}
	}
	return nil
}

// generic turns a typed SDK result into the API's JSON shape (numbers as float64).
func generic(result any) (any, error) {
	raw, err := json.Marshal(result)
	if err != nil {
		return nil, err
	}
	var out any
	return out, json.Unmarshal(raw, &out)
}

func jsonText(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

func lookup(value any, path string) (any, error) {
	for _, part := range strings.Split(path, ".") {
		switch x := value.(type) {
		case map[string]any:
			value = x[part]
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i >= len(x) {
				return nil, fmt.Errorf("no %q in %s", path, jsonText(value))
			}
			value = x[i]
		default:
			return nil, fmt.Errorf("no %q in %s", path, jsonText(value))
		}
	}
	return value, nil
}

// match compares a value with an expectation (see the README's "Comparing results").
func match(want, got any, where string) error {
	switch w := want.(type) {
	case map[string]any:
		if len(w) == 1 {
			for k, arg := range w {
				if strings.HasPrefix(k, "$") {
					return matcher(k, arg, got, where)
				}
			}
		}
		obj, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want an object, got %s", where, jsonText(got))
		}
		for k, item := range w {
			value, present := obj[k]
			if !present {
				return fmt.Errorf("%s: no %q in %s", where, k, jsonText(got))
			}
			if err := match(item, value, where+"."+k); err != nil {
				return err
			}
		}
		return nil
	case []any:
		arr, ok := got.([]any)
		if !ok || len(arr) != len(w) {
			return fmt.Errorf("%s: want %d items, got %s", where, len(w), jsonText(got))
		}
		for i := range w {
			if err := match(w[i], arr[i], fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
		return nil
	}
	if !reflect.DeepEqual(want, got) {
		return fmt.Errorf("%s: want %s, got %s", where, jsonText(want), jsonText(got))
	}
	return nil
}

func matcher(kind string, arg, got any, where string) error {
	text, isText := got.(string)
	switch kind {
	case "$startsWith":
		if isText && strings.HasPrefix(text, arg.(string)) {
			return nil
		}
	case "$contains":
		if isText && strings.Contains(text, arg.(string)) {
			return nil
		}
	case "$type":
		if jsonType(got) == arg {
			return nil
		}
	case "$includes", "$excludes":
		return membership(kind, arg.([]any), got, where)
	case "$atMost", "$atLeast":
		n, isNumber := got.(float64)
		if isNumber && (kind == "$atMost" && n <= arg.(float64) || kind == "$atLeast" && n >= arg.(float64)) {
			return nil
		}
	default:
		return fmt.Errorf("%s: unknown matcher %s", where, kind)
	}
	return fmt.Errorf("%s: %s %s does not hold for %s", where, kind, jsonText(arg), jsonText(got))
}

func membership(kind string, wanted []any, got any, where string) error {
	arr, ok := got.([]any)
	if !ok {
		return fmt.Errorf("%s: want an array, got %s", where, jsonText(got))
	}
	for _, w := range wanted {
		found := false
		for _, item := range arr {
			if match(w, item, where) == nil {
				found = true
				break
			}
		}
		if found != (kind == "$includes") {
			return fmt.Errorf("%s: %s %s does not hold for %s", where, kind, jsonText(w), jsonText(got))
		}
	}
	return nil
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case nil:
		return "null"
	}
	return "unknown"
}

// perform runs one op through the SDK's public API.
func perform(ctx context.Context, c *queuecore.Client, op string, a map[string]any) (any, error) {
	switch op {
	case "health":
		return c.Health(ctx)
	case "topics.create":
		return c.Topics.Create(ctx, queuecore.TopicConfig{
			Name: str(a, "name"), Partitions: optionalNum(a, "partitions"), Retention: str(a, "retention"), Delivery: str(a, "delivery"),
			OnEnqueue: str(a, "onEnqueue"),
		})
	case "topics.list":
		return c.Topics.List(ctx)
	case "topics.describe":
		return c.Topics.Describe(ctx, str(a, "name"))
	case "topics.delete":
		return c.Topics.Delete(ctx, str(a, "name"))
	case "publish":
		var opts []queuecore.PublishOption
		if k := str(a, "key"); k != "" {
			opts = append(opts, queuecore.WithKey(k))
		}
		if k := str(a, "idempotencyKey"); k != "" {
			opts = append(opts, queuecore.WithIdempotencyKey(k))
		}
		if k, ok := a["fairnessKey"].(string); ok {
			opts = append(opts, queuecore.WithFairnessKey(k))
		}
		if keys := strs(a, "throttleKeys"); keys != nil {
			opts = append(opts, queuecore.WithThrottleKeys(keys...))
		}
		return c.Publish(ctx, str(a, "topic"), a["data"], opts...)
	case "publishBatch":
		var messages []queuecore.OutgoingMessage
		for _, item := range a["messages"].([]any) {
			m := item.(map[string]any)
			message := queuecore.OutgoingMessage{Data: m["data"], Key: str(m, "key"), ThrottleKeys: strs(m, "throttleKeys")}
			if k, ok := m["fairnessKey"].(string); ok {
				message.FairnessKey = &k
			}
			messages = append(messages, message)
		}
		return c.PublishBatch(ctx, str(a, "topic"), messages)
	case "consume":
		return consume(ctx, c, a)
	case "publishConcurrently":
		return publishConcurrently(ctx, a)
	case "consumeAcking":
		return consumeCounting(ctx, c, a, func(ctx context.Context, msg *queuecore.Message) error { return msg.Ack(ctx) })
	case "consumeSlowly":
		pause := time.Duration(num(a, "handlerMs")) * time.Millisecond
		return consumeCounting(ctx, c, a, func(ctx context.Context, msg *queuecore.Message) error {
			time.Sleep(pause)
			return msg.Ack(ctx)
		})
	case "consumeWithStall":
		return consumeWithStall(ctx, c, a)
	case "dlq.inspect":
		return c.DLQ.Inspect(ctx, str(a, "topic"), str(a, "group"), queuecore.InspectOptions{Limit: num(a, "limit")})
	case "dlq.replay":
		n, err := c.DLQ.Replay(ctx, str(a, "topic"), str(a, "group"), str(a, "messageId"))
		return map[string]any{"replayed": n}, err
	case "dlq.replayAll":
		if _, counted := a["count"]; counted {
			n, err := c.DLQ.ReplayCount(ctx, str(a, "topic"), str(a, "group"), num(a, "count"))
			return map[string]any{"replayed": n}, err
		}
		n, err := c.DLQ.ReplayAll(ctx, str(a, "topic"), str(a, "group"))
		return map[string]any{"replayed": n}, err
	case "offsets.get":
		return withoutPartition(c.Offsets.Get(ctx, str(a, "topic"), str(a, "group"), num(a, "partition")))
	case "offsets.seek":
		return withoutPartition(c.Offsets.Seek(ctx, str(a, "topic"), str(a, "group"), num(a, "partition"), int64(num(a, "offset"))))
	case "offsets.reset":
		return c.Offsets.Reset(ctx, str(a, "topic"), str(a, "group"), resetTo(a["to"]))
	case "groups.list":
		return c.Groups.List(ctx, str(a, "topic"))
	case "groups.describe":
		return c.Groups.Describe(ctx, str(a, "topic"), str(a, "group"))
	case "groups.reset":
		return c.Groups.ResetOffsets(ctx, str(a, "topic"), str(a, "group"), resetTo(a["to"]))
	case "groups.configure":
		return configure(ctx, c, a)
	case "groups.testPush":
		return c.Groups.TestPush(ctx, str(a, "topic"), str(a, "group"))
	case "push.verify":
		return verifyPush(a)
	case "groups.stats":
		return c.Groups.Stats(ctx, str(a, "topic"), str(a, "group"))
	case "config.set":
		return c.Config.Set(ctx, str(a, "key"), str(a, "value"))
	case "config.get":
		return c.Config.Get(ctx, str(a, "key"))
	case "config.list":
		return c.Config.List(ctx, str(a, "prefix"))
	case "config.delete":
		return map[string]any{"deleted": true}, c.Config.Delete(ctx, str(a, "key"))
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

// configure is groups.configure: the group, with "pushSecret" null unless the call made it.
func configure(ctx context.Context, c *queuecore.Client, a map[string]any) (any, error) {
	settings := groupSettings(a)
	settings.RotateSecret = a["rotateSecret"] == true
	if dl, ok := a["deadLetter"].(map[string]any); ok {
		settings.DeadLetter = deadLetterPolicy(dl)
	}
	if push, given := a["push"]; given && push == nil {
		settings.PushOff = true
	} else if p, ok := push.(map[string]any); ok {
		timeout, _ := time.ParseDuration(str(p, "timeout"))
		settings.Push = &queuecore.PushConfig{Endpoint: str(p, "endpoint"), MaxInFlight: num(p, "maxInFlight"), Timeout: timeout, Ordered: p["ordered"] == true}
	}
	group, err := c.Groups.Configure(ctx, str(a, "topic"), str(a, "group"), settings)
	if err != nil {
		return nil, err
	}
	value, err := generic(group)
	if err != nil {
		return nil, err
	}
	fields := value.(map[string]any)
	if group.PushSecret == "" {
		fields["pushSecret"] = nil
	}
	return fields, nil
}

// verifyPush is push.verify: the SDK's verifier on a request given as headers and a body.
func verifyPush(a map[string]any) (any, error) {
	header := http.Header{}
	for name, value := range a["headers"].(map[string]any) {
		header.Set(name, value.(string))
	}
	tolerance := queuecore.DefaultPushTolerance
	if s, ok := a["toleranceS"].(float64); ok {
		tolerance = time.Duration(s * float64(time.Second))
	}
	now := time.Unix(int64(a["now"].(float64)), 0)
	message, err := queuecore.VerifyPush(str(a, "secret"), header, []byte(str(a, "body")), queuecore.WithTolerance(tolerance), queuecore.WithNow(now))
	if err != nil {
		return nil, err
	}
	return generic(message)
}

func withoutPartition(p *queuecore.PartitionOffset, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	return map[string]any{"current": p.Current, "latest": p.Latest, "lag": p.Lag}, nil
}

func resetTo(v any) queuecore.ResetTo {
	switch v {
	case "earliest":
		return queuecore.ResetEarliest
	case "latest":
		return queuecore.ResetLatest
	}
	return queuecore.ResetToOffset(int64(v.(float64)))
}

// groupSettings are a groups.configure step's settings: startFrom, fairness, onFailure.
func groupSettings(a map[string]any) queuecore.GroupSettings {
	settings := queuecore.GroupSettings{StartFrom: str(a, "startFrom")}
	if f, ok := a["fairness"].(map[string]any); ok {
		fairness := &queuecore.Fairness{DefaultWeight: num(f, "defaultWeight"), Quantum: num(f, "quantum")}
		if weights, ok := f["weights"].(map[string]any); ok {
			fairness.Weights = map[string]int{}
			for key, weight := range weights {
				fairness.Weights[key] = int(weight.(float64))
			}
		}
		settings.Fairness = fairness
	} else if v, given := a["fairness"]; given && v == nil {
		settings.FairnessOff = true
	}
	if hook, ok := a["onFailure"].(string); ok {
		settings.OnFailure = &hook
	}
	return settings
}

func strs(a map[string]any, key string) []string {
	items, ok := a[key].([]any)
	if !ok {
		return nil
	}
	out := make([]string, len(items))
	for i, item := range items {
		out[i], _ = item.(string)
	}
	return out
}

func str(a map[string]any, key string) string {
	s, _ := a[key].(string)
	return s
}

func optionalNum(a map[string]any, key string) *int {
	if n, ok := a[key].(float64); ok {
		return queuecore.Int(int(n))
	}
	return nil
}

func num(a map[string]any, key string) int {
	n, _ := a[key].(float64)
	return int(n)
}

// consumeRun collects a consume step's deliveries and events.
type consumeRun struct {
	mu       sync.Mutex
	actions  []string
	reason   string
	count    int
	handled  []map[string]any
	events   []string
	finished chan struct{}
}

func consume(ctx context.Context, c *queuecore.Client, a map[string]any) (any, error) {
	run := &consumeRun{reason: str(a, "error"), count: num(a, "count"), finished: make(chan struct{})}
	for _, action := range a["actions"].([]any) {
		run.actions = append(run.actions, action.(string))
	}
	opts := queuecore.ConsumeOptions{StartFrom: str(a, "startFrom"), Pull: str(a, "mode") == "pull", Wait: time.Second, OnEvent: run.event}
	if dl, ok := a["deadLetter"].(map[string]any); ok {
		opts.DeadLetter = deadLetterPolicy(dl)
	}
	consumer, err := c.Consume(ctx, str(a, "topic"), str(a, "group"), opts)
	if err != nil {
		return nil, err
	}
	if err := consumer.Start(ctx, run.handle); err != nil {
		return nil, err
	}
	timeout := time.Duration(num(a, "timeoutMs")) * time.Millisecond
	if timeout == 0 {
		timeout = 20 * time.Second
	}
	select {
	case <-run.finished:
	case <-time.After(timeout):
	}
	if err := consumer.Stop(ctx); err != nil {
		return nil, err
	}
	if err := consumer.Wait(); err != nil {
		return nil, err
	}
	return run.result()
}

func deadLetterPolicy(dl map[string]any) *queuecore.DeadLetterPolicy {
	policy := &queuecore.DeadLetterPolicy{}
	if n, ok := dl["maxRetries"].(float64); ok {
		policy.MaxRetries = queuecore.Int(int(n))
	}
	if d, ok := dl["retryDelay"].(string); ok {
		policy.RetryDelay, _ = time.ParseDuration(d)
	}
	if n, ok := dl["alertThreshold"].(float64); ok {
		policy.AlertThreshold = int(n)
	}
	return policy
}

func (r *consumeRun) event(e queuecore.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, string(e.Kind))
}

func (r *consumeRun) handle(ctx context.Context, msg *queuecore.Message) error {
	r.mu.Lock()
	index := len(r.handled)
	if index >= r.count {
		r.mu.Unlock()
		return nil
	}
	action := r.actions[len(r.actions)-1]
	if index < len(r.actions) {
		action = r.actions[index]
	}
	entry := map[string]any{
		"messageId": msg.MessageID, "topic": msg.Topic, "partition": msg.Partition, "offset": msg.Offset,
		"data": msg.Data, "key": msg.Key, "attempt": msg.Attempt,
	}
	if msg.FairnessKey != nil {
		entry["fairnessKey"] = *msg.FairnessKey
	}
	r.mu.Unlock()
	err := settle(ctx, msg, action, r.reason, entry)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handled = append(r.handled, entry)
	if len(r.handled) == r.count {
		close(r.finished)
	}
	return err
}

func settle(ctx context.Context, msg *queuecore.Message, action, reason string, entry map[string]any) error {
	switch action {
	case "ack":
		return msg.Ack(ctx)
	case "nack":
		_, err := msg.Nack(ctx, reason)
		return err
	case "extend+ack":
		extended, err := msg.Extend(ctx, 30*time.Second)
		if err != nil {
			return err
		}
		entry["extended"] = extended
		return msg.Ack(ctx)
	}
	return nil
}

func (r *consumeRun) result() (any, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.handled) < r.count {
		return nil, fmt.Errorf("handled %d of %d messages in time: %s", len(r.handled), r.count, jsonText(r.handled))
	}
	sorted := append([]map[string]any(nil), r.handled...)
	sort.SliceStable(sorted, func(i, j int) bool { return sortKey(sorted[i]) < sortKey(sorted[j]) })
	events := append([]string{}, r.events...)
	return map[string]any{"messages": sorted, "events": events}, nil
}

func sortKey(entry map[string]any) string {
	return fmt.Sprintf("%08d/%016d/%04d", entry["partition"], entry["offset"], entry["attempt"])
}

// countingTransport counts the publish requests a client sends.
type countingTransport struct {
	mu       sync.Mutex
	requests int
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == "POST" && (strings.HasSuffix(req.URL.Path, "/messages") || strings.HasSuffix(req.URL.Path, "/messages/batch")) {
		t.mu.Lock()
		t.requests++
		t.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

// publishConcurrently makes count publishes at once on a client of the developer key that
// counts its requests: PublishAsync in call order, each waited for afterwards (goroutines each
// calling Publish would have no call order to keep). What was stored, and how many requests.
func publishConcurrently(ctx context.Context, a map[string]any) (any, error) {
	counter := &countingTransport{}
	c, err := queuecore.New(queuecore.WithAPIKey(os.Getenv("QUEUECORE_DEVELOPER_API_KEY")),
		queuecore.WithHTTPClient(&http.Client{Transport: counter}))
	if err != nil {
		return nil, err
	}
	count, keys := num(a, "count"), num(a, "keys")
	pending := make([]*queuecore.PendingPublish, count)
	for n := range pending {
		pending[n] = c.PublishAsync(str(a, "topic"), map[string]int{"n": n}, queuecore.WithKey(fmt.Sprintf("k%d", n%keys)))
	}
	results := make([]*queuecore.PublishResult, count)
	for n, p := range pending {
		results[n], _ = p.Get(ctx)
	}
	stored, distinct, ordered := 0, map[string]bool{}, true
	last := map[int]int64{}
	for n, r := range results {
		if r == nil {
			continue
		}
		stored++
		distinct[fmt.Sprintf("%d:%d", r.Partition, r.Offset)] = true
		if previous, seen := last[n%keys]; seen && r.Offset <= previous {
			ordered = false
		}
		last[n%keys] = r.Offset
	}
	counter.mu.Lock()
	defer counter.mu.Unlock()
	return map[string]any{"stored": stored, "distinct": len(distinct), "ordered": ordered, "requests": counter.requests}, nil
}

// consumeCounting runs a default consumer doing work for each message until count distinct
// messages; the deliveries and the refused acks it reported.
func consumeCounting(ctx context.Context, c *queuecore.Client, a map[string]any, work queuecore.Handler) (any, error) {
	var mu sync.Mutex
	seen := map[string]int{}
	refused := 0
	finished := make(chan struct{})
	opts := queuecore.ConsumeOptions{StartFrom: str(a, "startFrom"), OnError: func(err error) {
		if errors.Is(err, queuecore.ErrAckRejected) {
			mu.Lock()
			refused++
			mu.Unlock()
		}
	}}
	if d := str(a, "ackTimeout"); d != "" {
		opts.AckTimeout, _ = time.ParseDuration(d)
	}
	if dl, ok := a["deadLetter"].(map[string]any); ok {
		opts.DeadLetter = deadLetterPolicy(dl)
	}
	consumer, err := c.Consume(ctx, str(a, "topic"), str(a, "group"), opts)
	if err != nil {
		return nil, err
	}
	count := num(a, "count")
	err = consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
		mu.Lock()
		seen[msg.MessageID]++
		mu.Unlock()
		err := work(ctx, msg)
		mu.Lock()
		if len(seen) == count {
			close(finished)
			count = -1 // closed once
		}
		mu.Unlock()
		return err
	})
	if err != nil {
		return nil, err
	}
	timeout := time.Duration(num(a, "timeoutMs")) * time.Millisecond
	select {
	case <-finished:
	case <-time.After(timeout):
	}
	if err := consumer.Stop(ctx); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	if count != -1 {
		return nil, fmt.Errorf("%d of %d messages in time", len(seen), num(a, "count"))
	}
	deliveries := 0
	for _, n := range seen {
		deliveries += n
	}
	duplicates := deliveries - len(seen)
	return map[string]any{"acked": len(seen), "handled": len(seen), "duplicates": duplicates, "refused": refused}, consumer.Wait()
}

// consumeWithStall holds the first message stallMs (past its lease) before its ack and acks
// the rest at once, until count messages were handled.
func consumeWithStall(ctx context.Context, c *queuecore.Client, a map[string]any) (any, error) {
	var mu sync.Mutex
	seen := [][2]any{}
	staleAckRefused, leaseExpiredReported := false, false
	finished := make(chan struct{})
	opts := queuecore.ConsumeOptions{StartFrom: str(a, "startFrom"), OnError: func(err error) {
		if errors.Is(err, queuecore.ErrLeaseExpired) {
			mu.Lock()
			leaseExpiredReported = true
			mu.Unlock()
		}
	}}
	opts.AckTimeout, _ = time.ParseDuration(str(a, "ackTimeout"))
	opts.FlowControl.MaxMessages = num(a, "maxMessages")
	opts.FlowControl.MaxLeaseExtension, _ = time.ParseDuration(str(a, "maxLeaseExtension"))
	consumer, err := c.Consume(ctx, str(a, "topic"), str(a, "group"), opts)
	if err != nil {
		return nil, err
	}
	count, stall := num(a, "count"), time.Duration(num(a, "stallMs"))*time.Millisecond
	err = consumer.Start(ctx, func(ctx context.Context, msg *queuecore.Message) error {
		var data any
		if err := msg.Decode(&data); err != nil {
			return err
		}
		mu.Lock()
		if len(seen) >= count {
			mu.Unlock()
			return nil
		}
		seen = append(seen, [2]any{data, msg.Attempt})
		first := len(seen) == 1
		mu.Unlock()
		if first {
			time.Sleep(stall)
			err := msg.AckWithResult(ctx)
			mu.Lock()
			staleAckRefused = errors.Is(err, queuecore.ErrAckRejected) && strings.Contains(err.Error(), "lease had ended")
			mu.Unlock()
		} else if err := msg.Ack(ctx); err != nil {
			return err
		}
		mu.Lock()
		if len(seen) == count {
			close(finished)
		}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-finished:
	case <-time.After(time.Duration(num(a, "timeoutMs")) * time.Millisecond):
	}
	if err := consumer.Stop(ctx); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < count {
		return nil, fmt.Errorf("%d of %d messages in time: %v", len(seen), count, seen)
	}
	return map[string]any{"seen": seen, "staleAckRefused": staleAckRefused, "leaseExpiredReported": leaseExpiredReported}, consumer.Wait()
}
