package console

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fairrelay/fairrelay"
	"github.com/fairrelay/fairrelay/inbox"
)

// shortDuration is d as a page shows it: durations are recorded to the
// millisecond, so one below it (recorded 0) reads "<1ms", not "0s" (a
// fresh user's report: "latency p50 0s").
func shortDuration(d time.Duration) string {
	if d >= 0 && d < time.Millisecond {
		return "<1ms"
	}
	return d.String()
}

// pageSize is the rows of a listing page.
const pageSize = 50

// sampleLimit bounds the settled attempts the overview's charts read.
const sampleLimit = 50000

var funcs = template.FuncMap{
	"wall": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"wallms": func(ms int64) string {
		if ms == 0 {
			return "-"
		}
		return time.UnixMilli(ms).UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"deref": func(p any) any {
		switch v := p.(type) {
		case *string:
			if v == nil {
				return "-"
			}
			return *v
		case *int64:
			if v == nil {
				return "-"
			}
			return *v
		}
		return p
	},
	"why":       why,
	"detail":    eventDetail,
	"eventpath": eventPath,
	"flowpath":  flowPath,
	"dur":       shortDuration,
}

type overviewData struct {
	O *fairrelay.Overview
	// Backlog is the last count of the events not acked (backlogCount);
	// Ready is that count less the inflight and quarantined heads, shown
	// when there is a count and no count is capped.
	Backlog   backlogView
	Ready     int64
	ShowReady bool
	Capped    bool
	Blocked   []fairrelay.EventState
	Paused    []fairrelay.FlowInfo
	Charts    charts
	OldestAge string
	// LastSettle is when the newest delivery of the last hour was settled
	// (zero: none), LastSettleAgo how long before this read: whether a
	// relay is at work, which the store's clock alone does not show (it
	// stands still while no relay runs; an operator's report).
	LastSettle    time.Time
	LastSettleAgo string
}

func (s *Server) overview(r *http.Request) (any, error) {
	ctx := r.Context()
	o, err := s.q.Overview(ctx, fairrelay.OverviewParams{})
	if err != nil {
		return nil, err
	}
	d := overviewData{O: o, Backlog: s.backlog.view(),
		Capped: o.Inflight >= fairrelay.MaxCount || o.Quarantined >= fairrelay.MaxCount || o.Paused >= fairrelay.MaxCount}
	// Ready is the count less this read's heads: as old as the count.
	d.Ready = d.Backlog.N - o.Inflight - o.Quarantined
	d.ShowReady = d.Backlog.Counted && !d.Capped && d.Ready >= 0
	if d.Blocked, err = s.q.QuarantinedWhere(ctx, fairrelay.QuarantinedParams{Limit: 10}); err != nil {
		return nil, err
	}
	if d.Paused, err = s.q.Flows(ctx, fairrelay.FlowsParams{Paused: true, Limit: 10}); err != nil {
		return nil, err
	}
	now := s.now()
	ds, err := s.q.Deliveries(ctx, now.Add(-time.Hour), sampleLimit)
	if err != nil {
		return nil, err
	}
	d.Charts = chartsOf(ds, now, len(ds) == sampleLimit)
	if len(ds) > 0 { // newest first
		d.LastSettle = ds[0].Settled.UTC()
		d.LastSettleAgo = max(0, now.Sub(ds[0].Settled)).Truncate(time.Second).String()
	}
	if o.Oldest != nil {
		d.OldestAge = ticks(o.Clock.Tick - o.Oldest.EnqueuedAt)
	}
	return d, nil
}

type flowsData struct {
	Prefix, After string
	Paused        bool
	Flows         []fairrelay.FlowInfo
	Tick          int64
	Next          string
}

func (s *Server) flows(r *http.Request) (any, error) {
	qs := r.URL.Query()
	paused, err := boolParam(r, "paused")
	if err != nil {
		return nil, err
	}
	d := flowsData{Prefix: qs.Get("prefix"), After: qs.Get("after"), Paused: paused}
	c, err := s.q.Clock(r.Context())
	if err != nil {
		return nil, err
	}
	d.Tick = c.Tick
	p := fairrelay.FlowsParams{Prefix: d.Prefix, After: d.After, Paused: d.Paused, Limit: pageSize}
	if d.Flows, err = s.q.Flows(r.Context(), p); err != nil {
		return nil, err
	}
	if len(d.Flows) == pageSize {
		d.Next = d.Flows[len(d.Flows)-1].Flow
	}
	return d, nil
}

// why says in words why a flow is not moving, or that it is.
func why(f fairrelay.FlowInfo, tick int64) string {
	h := f.Head.Head
	switch {
	case f.Paused && f.PausedBy != "":
		return fmt.Sprintf("paused by %s because “%s”, at tick %d, %s ago", f.PausedBy, f.PausedReason, f.PausedAt, ticks(tick-f.PausedAt))
	case f.Paused:
		return fmt.Sprintf("paused because “%s”, at tick %d, %s ago", f.PausedReason, f.PausedAt, ticks(tick-f.PausedAt))
	case h == nil:
		return "drained: every event is acked"
	case h.State == fairrelay.StateQuarantined:
		return fmt.Sprintf("quarantined because %s: waits for a redrive", deref(h.Reason))
	case h.State == fairrelay.StateInflight:
		return fmt.Sprintf("leased until tick %d, in %s (generation %d, attempt %d): a delivery may be under way (a relay that stopped leaves it to run out)", derefInt(h.LeaseUntil), ticks(derefInt(h.LeaseUntil)-tick), h.Generation, h.Attempts)
	case h.NextAt != nil && *h.NextAt > tick:
		return fmt.Sprintf("backing off until tick %d, in %s, after %s", *h.NextAt, ticks(*h.NextAt-tick), plural(h.Attempts, "attempt"))
	}
	return fmt.Sprintf("eligible: waits for its turn (served %d)", f.Served)
}

// eventDetail says where event e of flow f stands, for the flow page's
// list: quarantined and why, leased until when, waiting behind the flow's
// head (an event behind it is ready, with the tick it was enqueued at as
// its next_at, which read as due: a fresh user's report), or, for the head
// itself, when it is due.
func eventDetail(e fairrelay.EventState, f *fairrelay.FlowInfo, tick int64) string {
	h := f.Head.Head
	switch {
	case e.State == fairrelay.StateQuarantined:
		return "quarantined because " + deref(e.Reason)
	case e.State == fairrelay.StateInflight:
		return fmt.Sprintf("leased until tick %d", derefInt(e.LeaseUntil))
	case e.State != fairrelay.StateReady:
		return ""
	case h != nil && e.Seq > h.Seq:
		return fmt.Sprintf("waits behind the flow's head, seq %d (%s)", h.Seq, h.State)
	case e.NextAt != nil && *e.NextAt > tick:
		return fmt.Sprintf("backing off until tick %d, in %s", *e.NextAt, ticks(*e.NextAt-tick))
	case f.Paused:
		return "due, but its flow is paused"
	}
	return "due: waits for its turn"
}

// ticks says n ticks of the store's clock as the relay keeps it (1 tick =
// 1 ms, SPEC §7): "147 ticks (0.147 s)", "90000 ticks (1m30s)".
func ticks(n int64) string {
	return fmt.Sprintf("%s (%s)", plural(n, "tick"), time.Duration(n)*time.Millisecond)
}

// plural is "1 attempt", "2 attempts".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefInt(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

type eventData struct {
	E          *fairrelay.EventRecord
	Flow       *fairrelay.FlowInfo
	Body       string
	BodyKind   string
	Attempts   []fairrelay.Attempt
	Tick       int64
	CanRedrive bool
	CanExpedit bool
	IsHead     bool
	// Behind is the flow's head when the event waits behind it (ready, a
	// later seq), else nil.
	Behind *fairrelay.EventState
}

// eventPath is the path of the page of event id: /event/ and the id as
// one path segment, escaped, which the router unescapes (r.PathValue), so
// that an id with '/', '?', '#', '%', a space or any other character comes
// back as it is. Only '%' escaped, an id with '/', '?' or '#' led to a 404
// and "100%25" to event "100%" (a fresh user's report). The ids "." and
// "..", which a browser takes out of a path even escaped (%2e), go in the
// query instead: /event?id=..
func eventPath(id string) string { return itemPath("event", "id", id) }

// itemPath is the path of the page of one item named v: /PAGE/ and v as
// one path segment, escaped; "." and ".." in the query, as KEY
// (eventPath, flowPath).
func itemPath(page, key, v string) string {
	if v == "." || v == ".." {
		return "/" + page + "?" + key + "=" + url.QueryEscape(v)
	}
	return "/" + page + "/" + url.PathEscape(v)
}

// itemOf is the item a request of itemPath(page, key, …) names: the path
// segment the router unescaped (r.PathValue(key)), or on the bare route
// GET /PAGE the query's KEY.
func itemOf(r *http.Request, page, key string) string {
	if r.Pattern == "GET /"+page {
		return r.URL.Query().Get(key)
	}
	return r.PathValue(key)
}

// event serves /event/{id} and /event?id= (eventPath).
func (s *Server) event(r *http.Request) (any, error) {
	ctx := r.Context()
	id := itemOf(r, "event", "id")
	if err := fairrelay.CheckID("id", id); err != nil {
		return nil, err
	}
	e, err := s.q.Event(ctx, id)
	if err != nil {
		return nil, err
	}
	d := eventData{E: e}
	d.Body, d.BodyKind = bodyView(e.Body)
	if d.Attempts, err = s.q.Attempts(ctx, id); err != nil {
		return nil, err
	}
	if d.Flow, err = s.q.Flow(ctx, e.Flow); err != nil {
		return nil, err
	}
	c, err := s.q.Clock(ctx)
	if err != nil {
		return nil, err
	}
	d.Tick = c.Tick
	d.IsHead = d.Flow.Head.Head != nil && d.Flow.Head.Head.ID == e.ID
	if h := d.Flow.Head.Head; h != nil && e.State == fairrelay.StateReady && e.Seq > h.Seq {
		d.Behind = h
	}
	d.CanRedrive = e.State == fairrelay.StateQuarantined
	d.CanExpedit = e.State == fairrelay.StateReady && e.NextAt != nil && *e.NextAt > c.Tick
	return d, nil
}

// flowPath is the path of the page of flow id, as eventPath is of an
// event's: /flow/ and the id as one path segment, escaped; the ids "." and
// "..", which a browser takes out of a path, in the query: /flow?flow=..
func flowPath(flow string) string { return itemPath("flow", "flow", flow) }

// flowPagePath is flowPath with the page after seq after.
func flowPagePath(flow string, after int64) string {
	p := flowPath(flow)
	if strings.Contains(p, "?") {
		return p + "&after=" + strconv.FormatInt(after, 10)
	}
	return p + "?after=" + strconv.FormatInt(after, 10)
}

type flowData struct {
	F      *fairrelay.FlowInfo
	Tick   int64
	After  int64
	Events []fairrelay.EventState
	// Next is the path of the next page ("" on the last).
	Next string
}

// flow serves /flow/{flow} and /flow?flow= (flowPath): the flow, why it
// is not moving, and its events by seq from after+1, pageSize a page,
// acked ones too until a prune deletes them. It reads them with
// Queue.Events from (flow, after), at most the seqs the flow has left
// (its last seq less after), so a page reads no more than pageSize rows
// and, unless a prune left gaps, none of the next flow's.
func (s *Server) flow(r *http.Request) (any, error) {
	ctx := r.Context()
	flow := itemOf(r, "flow", "flow")
	if err := fairrelay.CheckID("flow", flow); err != nil {
		return nil, err
	}
	after, err := intParam(r, "after", 0)
	if err != nil {
		return nil, err
	}
	d := flowData{After: after}
	if d.F, err = s.q.Flow(ctx, flow); err != nil {
		return nil, err
	}
	c, err := s.q.Clock(ctx)
	if err != nil {
		return nil, err
	}
	d.Tick = c.Tick
	limit := int(min(pageSize, max(0, d.F.Seq-after)))
	if limit == 0 {
		return d, nil
	}
	es, err := s.q.Events(ctx, flow, after, limit)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if e.Flow != flow { // past its last event: the next flow's
			return d, nil
		}
		d.Events = append(d.Events, e.EventState)
	}
	if len(es) == limit && len(es) > 0 && es[len(es)-1].Seq < d.F.Seq {
		last := es[len(es)-1].Seq
		d.Next = flowPagePath(flow, last)
	}
	return d, nil
}

type quarantineData struct {
	Reason, Prefix, Group, After string
	Heads                        []fairrelay.EventState
	Next                         string
	Reasons                      []string
}

// quarantineReasons are the reasons a head is quarantined for (SPEC §2).
var quarantineReasons = []string{"budget_exhausted", "id_conflict", "sequence_conflict", "unsupported_delta", "invalid_body", "rejected"}

func (s *Server) quarantine(r *http.Request) (any, error) {
	qs := r.URL.Query()
	d := quarantineData{Reason: qs.Get("reason"), Prefix: qs.Get("prefix"), Group: qs.Get("group"), After: qs.Get("after"), Reasons: quarantineReasons}
	var err error
	d.Heads, err = s.q.QuarantinedWhere(r.Context(), fairrelay.QuarantinedParams{After: d.After, Prefix: d.Prefix, Reason: d.Reason, Group: d.Group, Limit: pageSize})
	if err != nil {
		return nil, err
	}
	if len(d.Heads) == pageSize {
		d.Next = d.Heads[len(d.Heads)-1].Flow
	}
	return d, nil
}

type groupsData struct {
	Groups []fairrelay.GroupInfo
	Next   string
}

// groups lists the groups (SPEC §8) by name, a page at a time: weight,
// limits, flows and backlog, as inspect groups shows them.
func (s *Server) groups(r *http.Request) (any, error) {
	after := r.URL.Query().Get("after")
	if after != "" {
		if err := fairrelay.CheckID("after", after); err != nil {
			return nil, err
		}
	}
	var d groupsData
	var err error
	if d.Groups, err = s.q.Groups(r.Context(), after, pageSize); err != nil {
		return nil, err
	}
	if len(d.Groups) == pageSize {
		d.Next = d.Groups[len(d.Groups)-1].Group
	}
	return d, nil
}

type auditData struct {
	Rows []fairrelay.AuditEntry
	Next int64
}

func (s *Server) audit(r *http.Request) (any, error) {
	after, err := intParam(r, "after", 0)
	if err != nil {
		return nil, err
	}
	var d auditData
	if d.Rows, err = s.q.Audit(r.Context(), after, pageSize); err != nil {
		return nil, err
	}
	if len(d.Rows) == pageSize {
		d.Next = d.Rows[len(d.Rows)-1].No
	}
	return d, nil
}

type inboxData struct {
	None  bool
	After string
	Rows  []inbox.Projection
	Next  string
	// Waiting and Superseded count the held deliveries (inbox.HeldCounts).
	Waiting, Superseded int64
}

func (s *Server) inbox(r *http.Request) (any, error) {
	if s.cfg.Inbox == nil {
		return inboxData{None: true}, nil
	}
	d := inboxData{After: r.URL.Query().Get("after")}
	if d.After != "" {
		if err := fairrelay.CheckID("after", d.After); err != nil {
			return nil, err
		}
	}
	var err error
	if d.Rows, err = s.cfg.Inbox.Projections(r.Context(), d.After, pageSize); err != nil {
		return nil, err
	}
	if len(d.Rows) == pageSize {
		d.Next = d.Rows[len(d.Rows)-1].Flow
	}
	if d.Waiting, d.Superseded, err = s.cfg.Inbox.HeldCounts(r.Context()); err != nil {
		return nil, err
	}
	return d, nil
}

// inboxPage is a page of the inbox's held deliveries or waivers: rows in
// (flow, seq) order after the flow and seq of the query's flow and seq
// parameters, and the link to the next page, if any.
type inboxPage[T any] struct {
	None bool
	Rows []T
	Next string
}

// inboxList loads a page of list (inbox.Held or inbox.Waivers) after the
// query's flow and seq ("" and 0: the first row; the inbox's paging checks
// them: ErrInvalidInput naming after_flow or after_seq), with the link to
// the next page at path once a page is full (Held ends a page with the
// whole of its last seq, so it may return more than pageSize rows); at
// gives a row's flow and seq.
func inboxList[T any](s *Server, r *http.Request, path string, list func(in *inbox.Inbox, ctx context.Context, flow string, seq int64, limit int) ([]T, error), at func(T) (string, int64)) (any, error) {
	var d inboxPage[T]
	if s.cfg.Inbox == nil {
		d.None = true
		return d, nil
	}
	seq, err := intParam(r, "seq", 0)
	if err != nil {
		return nil, err
	}
	if d.Rows, err = list(s.cfg.Inbox, r.Context(), r.URL.Query().Get("flow"), seq, pageSize); err != nil {
		return nil, err
	}
	if len(d.Rows) >= pageSize {
		flow, seq := at(d.Rows[len(d.Rows)-1])
		d.Next = path + "?" + url.Values{"flow": {flow}, "seq": {strconv.FormatInt(seq, 10)}}.Encode()
	}
	return d, nil
}

// held lists the receiver's held deliveries (inbox.Held): a broker
// consumer's deliveries that wait for their predecessor or are refused
// until the cause is fixed, and superseded copies, which never apply.
func (s *Server) held(r *http.Request) (any, error) {
	return inboxList(s, r, "/inbox/held", (*inbox.Inbox).Held, func(h inbox.HeldDelivery) (string, int64) { return h.Flow, h.Seq })
}

// waivers lists the operators' waivers (inbox.Waivers, fairrelay waive).
func (s *Server) waivers(r *http.Request) (any, error) {
	return inboxList(s, r, "/inbox/waivers", (*inbox.Inbox).Waivers, func(w inbox.Waiver) (string, int64) { return w.Flow, w.Seq })
}

// maxHexDump is the most bytes of a body that is not text the event page
// dumps (bodyView).
const maxHexDump = 16 << 10

// bodyView is a body as the event page shows it, and what it is: JSON
// indented ("JSON"); other text as it is (""); text with a control
// character other than tab, newline and carriage return, or a format
// character (a bidirectional override: what the page shows would not be
// what is stored), as a quoted Go string ("text with control or format
// characters, quoted", as inspect's tables quote such values); bytes that are not
// UTF-8 as a hex dump ("N bytes, not text: hex dump"), of the first
// maxHexDump bytes when there are more. The page is UTF-8
// HTML: raw bytes went into it as they were, a 0x00 as U+FFFD and 0xff or
// 0x10 unchanged (a fresh user's report), where inspect showed "(N bytes,
// not text)".
func bodyView(b []byte) (text, kind string) {
	if !utf8.Valid(b) {
		if len(b) > maxHexDump {
			// A dump is four times its bytes: a page of megabytes for a
			// large body, which no one reads through.
			return hex.Dump(b[:maxHexDump]), fmt.Sprintf("%d bytes, not text: hex dump of the first %d", len(b), maxHexDump)
		}
		return hex.Dump(b), fmt.Sprintf("%d bytes, not text: hex dump", len(b))
	}
	var pretty bytes.Buffer
	if json.Valid(b) && json.Indent(&pretty, b, "", "  ") == nil {
		return pretty.String(), "JSON"
	}
	for _, r := range string(b) {
		if r != '\t' && r != '\n' && r != '\r' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r)) {
			return strconv.Quote(string(b)), "text with control or format characters, quoted"
		}
	}
	return string(b), ""
}
