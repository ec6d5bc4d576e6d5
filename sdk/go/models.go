package queuecore

import (
	"encoding/json"
	"time"
)

// TopicConfig creates a topic; unset fields take the server's defaults (7d, exactly-once, 3).
type TopicConfig struct {
	Name         string `json:"name"`
	Retention    string `json:"retention,omitempty"`
	Delivery     string `json:"delivery,omitempty"`     // "exactly-once" or "at-least-once"
	Partitions   *int   `json:"partitions,omitempty"`   // queuecore.Int(6)
	LatencyClass string `json:"latencyClass,omitempty"` // "express" or "standard"
	// OnEnqueue is a Lua hook (function on_enqueue(msg)) that may set each message's fairness
	// key, weight and throttle keys; a 422 INVALID_HOOK *Error when it does not compile.
	OnEnqueue string `json:"onEnqueue,omitempty"`
}

// TopicUpdate raises partitions or changes retention or latency class; zero fields are kept.
type TopicUpdate struct {
	Partitions   int    `json:"partitions,omitempty"`
	Retention    string `json:"retention,omitempty"`
	LatencyClass string `json:"latencyClass,omitempty"`
	OnEnqueue    string `json:"onEnqueue,omitempty"` // a new onEnqueue hook
	// RemoveOnEnqueue removes the topic's hook (OnEnqueue must then be empty).
	RemoveOnEnqueue bool `json:"-"`
}

// TopicStats are retained messages, leased messages, live consumers and groups of a topic.
type TopicStats struct {
	Depth           int64 `json:"depth"`
	InFlight        int64 `json:"inFlight"`
	ActiveConsumers int   `json:"activeConsumers"`
	ConsumerGroups  int   `json:"consumerGroups"`
}

// Topic is a topic; Stats only from Topics.Describe.
type Topic struct {
	ID           string      `json:"id"`
	Name         string      `json:"name"`
	Partitions   int         `json:"partitions"`
	Retention    string      `json:"retention"`
	Delivery     string      `json:"delivery"`
	LatencyClass string      `json:"latencyClass"`
	Status       string      `json:"status"`
	CreatedAt    time.Time   `json:"createdAt"`
	Stats        *TopicStats `json:"stats,omitempty"`
	OnEnqueue    string      `json:"onEnqueue,omitempty"` // the topic's Lua hook, when it has one
}

// OutgoingMessage is one message to publish; Data is any JSON-encodable value.
type OutgoingMessage struct {
	Data           any               `json:"data"`
	Key            string            `json:"key,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	IdempotencyKey string            `json:"idempotencyKey,omitempty"`
	// FairnessKey is what a fair group schedules the message by (nil: none; "" is a key).
	FairnessKey *string `json:"fairnessKey,omitempty"`
	// ThrottleKeys (up to 8) must each have a token before a fair group delivers the message.
	ThrottleKeys []string `json:"throttleKeys,omitempty"`
}

// PublishResult is where a published message was stored, once durable.
type PublishResult struct {
	MessageID      string    `json:"messageId"`
	Offset         int64     `json:"offset"`
	Partition      int       `json:"partition"`
	Timestamp      time.Time `json:"timestamp"`
	LatencyMs      int64     `json:"latency"`
	IdempotencyKey string    `json:"-"`
}

// BatchItem is one message of a batch, in request order.
type BatchItem struct {
	MessageID string    `json:"messageId"`
	Offset    int64     `json:"offset"`
	Partition int       `json:"partition"`
	Timestamp time.Time `json:"timestamp"` // when it was stored (a repeated key: the original's)
}

// BatchResult is a batch committed as one: all of its messages were stored, or none.
type BatchResult struct {
	Count     int         `json:"count"`
	LatencyMs int64       `json:"latency"`
	Results   []BatchItem `json:"results"`
}

// GroupSummary is one consumer group of a topic.
type GroupSummary struct {
	Name        string `json:"name"`
	Consumers   int    `json:"consumers"`
	Lag         int64  `json:"lag"`
	DeadLetters int64  `json:"deadLetters"`
}

// PartitionState is a partition in a group: owner (member id), committed offset and lag.
type PartitionState struct {
	ID       int     `json:"id"`
	Consumer *string `json:"consumer"`
	Offset   int64   `json:"offset"`
	Lag      int64   `json:"lag"`
}

// Member is a member (consumer) of a group.
type Member struct {
	ID              string    `json:"id"`
	ClientID        string    `json:"clientId"`
	GenerationID    int64     `json:"generationId"`
	LastHeartbeatAt time.Time `json:"lastHeartbeatAt"`
}

// DeadLetterPolicy is retries before dead-lettering, the backoff base and the alert depth.
// Zero fields keep the group's current value.
type DeadLetterPolicy struct {
	MaxRetries     *int          // nil keeps; use Int(0) for "dead-letter on first failure"
	RetryDelay     time.Duration // the base of the exponential backoff
	AlertThreshold int           // DLQ depth that sends the alert webhook
}

// Int returns a pointer to n, for DeadLetterPolicy.MaxRetries.
func Int(n int) *int { return &n }

// GroupSettings configure a group; zero fields keep their current value.
type GroupSettings struct {
	StartFrom      string // "earliest" or "latest"
	AckTimeout     time.Duration
	MaxInFlight    int
	SessionTimeout time.Duration
	DeadLetter     *DeadLetterPolicy
	Push           *PushConfig // make it a push group (nil: push unchanged)
	PushOff        bool        // turn push off
	RotateSecret   bool        // a new signing secret (in PushSecret of the answer, once)
	// Fairness makes the group fair (&Fairness{} takes the defaults); nil keeps it as it is.
	Fairness *Fairness
	// FairnessOff turns fairness off (the group delivers in offset order again).
	FairnessOff bool
	// OnFailure is the group's Lua hook (function on_failure(msg)); nil keeps it.
	OnFailure *string
	// RemoveOnFailure removes the group's hook.
	RemoveOnFailure bool
}

// Group is a consumer group: members, partition owners, committed offsets, lag and settings.
type Group struct {
	Name         string           `json:"name"`
	Topic        string           `json:"topic"`
	Consumers    int              `json:"consumers"`
	GenerationID int64            `json:"generationId"`
	Partitions   []PartitionState `json:"partitions"`
	Members      []Member         `json:"members"`
	Config       map[string]any   `json:"config"`
	DeadLetters  int64            `json:"deadLetters"`
	// PushSecret is the push signing secret: only from the Configure call that made it.
	PushSecret string `json:"pushSecret,omitempty"`
}

// Lag is the messages not yet done over every partition.
func (g *Group) Lag() int64 {
	var total int64
	for _, p := range g.Partitions {
		total += p.Lag
	}
	return total
}

// PartitionOffset is a group's committed offset on a partition, its end, and the lag.
type PartitionOffset struct {
	Partition int   `json:"partition"`
	Current   int64 `json:"current"`
	Latest    int64 `json:"latest"`
	Lag       int64 `json:"lag"`
}

// ResetTo is where Offsets.Reset moves a group: ResetEarliest, ResetLatest or ResetToOffset(n).
type ResetTo struct{ value any }

var (
	// ResetEarliest moves to the first retained message.
	ResetEarliest = ResetTo{"earliest"}
	// ResetLatest skips to the end: only new messages are delivered.
	ResetLatest = ResetTo{"latest"}
)

// ResetToOffset moves every partition to offset.
func ResetToOffset(offset int64) ResetTo { return ResetTo{offset} }

// DeadLetter is a message that exhausted its retries: the original, why, when, how often.
type DeadLetter struct {
	MessageID        string            `json:"messageId"`
	Topic            string            `json:"topic"`
	Partition        int               `json:"partition"`
	Offset           int64             `json:"offset"`
	Data             json.RawMessage   `json:"data"`
	Key              *string           `json:"key"`
	Headers          map[string]string `json:"headers"`
	Timestamp        time.Time         `json:"timestamp"`
	Error            string            `json:"error"`
	Attempts         int               `json:"attempts"`
	FirstDeliveredAt time.Time         `json:"firstDeliveredAt"`
	DeadAt           time.Time         `json:"deadAt"`
	FairnessKey      *string           `json:"fairnessKey,omitempty"`
	ThrottleKeys     []string          `json:"throttleKeys,omitempty"`
}

// DeadLetterPage is dead letters oldest first, the queue's depth and the next page's cursor.
type DeadLetterPage struct {
	Messages  []DeadLetter `json:"messages"`
	Depth     int64        `json:"depth"`
	NextAfter *string      `json:"nextAfter"`
}

// AckRejection is one ack id the server refused, and why.
type AckRejection struct {
	AckID  string `json:"ackId"`
	Reason string `json:"reason"`
}

// Membership is a consumer's identity in its group, generation and partitions.
type Membership struct {
	MemberID            string `json:"memberId"`
	GenerationID        int64  `json:"generationId"`
	Assignments         []int  `json:"assignments"`
	HeartbeatIntervalMs int64  `json:"heartbeatIntervalMs"`
	SessionTimeoutMs    int64  `json:"sessionTimeoutMs"`
	MaxInFlight         int    `json:"maxInFlight"`  // the member's window
	AckTimeoutMs        int64  `json:"ackTimeoutMs"` // how long a delivery stays leased
	Delivery            string `json:"delivery"`     // "exactly-once" or "at-least-once"
}

// durationMs is a duration as the API takes it: whole milliseconds.
func durationMs(d time.Duration) int64 { return d.Milliseconds() }
