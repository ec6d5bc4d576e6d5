// Command qcbench measures the Go SDK's throughput from one process and prints one JSON line
// {"messages": N, "seconds": S}. QUEUECORE_API_KEY and QUEUECORE_URL name the API.
//
//	qcbench --mode publish-batch --topic T --messages N --batch 100
//	qcbench --mode consume-ack --topic T --messages N --batch 100 [--group G]
//	qcbench --mode keep-publish|keep-ack|keep-slow --topic T --messages N [--handler-ms M]
//
// publish-batch publishes N messages in batches; consume-ack consumes N messages from the
// earliest offset over the event stream (or --pull) and acks them in batches of --batch
// (or each with msg.Ack, --ack-each).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	queuecore "github.com/queuecore/queuecore-go"
)

type options struct {
	mode     string
	topic    string
	group    string
	messages int
	batch    int
	timeout  time.Duration
	pull     bool
	ackEach  bool
	inFlight int
	pauseMs  int
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "", "publish-batch or consume-ack")
	flag.StringVar(&o.topic, "topic", "", "topic (it must exist)")
	flag.StringVar(&o.group, "group", "qcbench", "consumer group of consume-ack")
	flag.IntVar(&o.messages, "messages", 10000, "how many messages")
	flag.IntVar(&o.batch, "batch", 100, "messages per publish batch or per ack request")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "give up after this long")
	flag.IntVar(&o.inFlight, "max-in-flight", 0, "the group's maxInFlight for consume-ack (default 20 × --batch)")
	flag.BoolVar(&o.ackEach, "ack-each", false, "consume-ack with one ack request per message (msg.Ack)")
	flag.BoolVar(&o.pull, "pull", false, "consume-ack by long-poll pulls of --batch instead of the event stream")
	flag.IntVar(&o.pauseMs, "handler-ms", 40, "keep-slow: milliseconds each message takes")
	flag.Parse()
	if o.topic == "" || o.messages < 1 || o.batch < 1 || o.batch > queuecore.MaxBatch {
		fail(fmt.Errorf("usage: qcbench --mode publish-batch|consume-ack --topic T --messages N --batch 1..%d", queuecore.MaxBatch))
	}
	client, err := queuecore.New()
	if err != nil {
		fail(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var seconds float64
	if strings.HasPrefix(o.mode, "keep-") {
		keep(ctx, client, o)
		return
	}
	switch o.mode {
	case "publish-batch":
		seconds, err = publishBatches(ctx, client, o)
	case "consume-ack":
		seconds, err = consumeAck(ctx, client, o)
	default:
		err = fmt.Errorf("unknown --mode %q", o.mode)
	}
	if err != nil {
		fail(err)
	}
	_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"messages": o.messages, "seconds": seconds})
}

func publishBatches(ctx context.Context, client *queuecore.Client, o options) (float64, error) {
	started := time.Now()
	for sent := 0; sent < o.messages; {
		size := o.batch
		if left := o.messages - sent; left < size {
			size = left
		}
		batch := make([]queuecore.OutgoingMessage, size)
		for i := range batch {
			batch[i] = queuecore.OutgoingMessage{Data: map[string]int{"n": sent + i}}
		}
		if _, err := client.PublishBatch(ctx, o.topic, batch); err != nil {
			return 0, err
		}
		sent += size
	}
	return time.Since(started).Seconds(), nil
}

func keep(ctx context.Context, client *queuecore.Client, o options) {
	var figures map[string]any
	var err error
	switch o.mode {
	case "keep-publish":
		figures, err = keepPublish(ctx, o)
	case "keep-ack":
		figures, err = keepConsume(ctx, client, o, 0)
	case "keep-slow":
		figures, err = keepConsume(ctx, client, o, time.Duration(o.pauseMs)*time.Millisecond)
	default:
		err = fmt.Errorf("unknown --mode %q", o.mode)
	}
	if err != nil {
		fail(err)
	}
	figures["messages"] = o.messages
	_ = json.NewEncoder(os.Stdout).Encode(figures)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "qcbench:", err)
	os.Exit(1)
}
