package console

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/fairrelay/fairrelay"
)

// maxSelected bounds the heads one quarantine redrive takes.
const maxSelected = 500

// act runs an operator action: POST /action/{redrive,expedite,pause,
// resume}, form fields csrf, reason, back (the page to return to) and the
// action's own: sel (redrive: "ID:GENERATION", repeated), id and
// generation (expedite), flow (pause, resume). The audit operator is the
// authenticated user's name, never a form field. An unauthenticated
// request gets 401, a read-only user or a missing or wrong CSRF token 403;
// bad input 400 naming the field; all before anything changes.
func (s *Server) act(w http.ResponseWriter, r *http.Request) {
	ss := s.identify(w, r)
	if ss == nil {
		s.fail(w, r, http.StatusUnauthorized, "not authenticated")
		return
	}
	if err := r.ParseForm(); err != nil {
		s.fail(w, r, http.StatusBadRequest, "form: "+err.Error())
		return
	}
	if !checkCSRF(r, ss) {
		s.log.Warn("console: action refused: CSRF token missing or wrong", "user", ss.user.Name, "action", r.PathValue("action"))
		s.fail(w, r, http.StatusForbidden, "csrf: missing or wrong token; reload the page")
		return
	}
	if ss.user.ReadOnly {
		s.fail(w, r, http.StatusForbidden, "forbidden: "+ss.user.Name+" is a read-only user")
		return
	}
	action := r.PathValue("action")
	reason := r.PostFormValue("reason")
	if err := fairrelay.CheckReason("reason", reason); err != nil {
		s.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	var msg string
	var err error
	switch action {
	case "redrive":
		msg, err = s.redrive(r, ss.user.Name, reason)
	case "expedite":
		msg, err = s.expedite(r, ss.user.Name, reason)
	case "pause", "resume":
		msg, err = s.flowAction(r, action, ss.user.Name, reason)
	default:
		s.fail(w, r, http.StatusNotFound, "no action "+strconv.Quote(action))
		return
	}
	if err != nil {
		s.failErr(w, r, err, "action", action, "user", ss.user.Name)
		return
	}
	s.log.Info("console: action", "action", action, "user", ss.user.Name, "result", msg)
	http.Redirect(w, r, s.withMsg(localPath(r.PostFormValue("back")), msg), http.StatusSeeOther)
}

// selection is one "ID:GENERATION" of a redrive form.
type selection struct {
	id  string
	gen int64
}

func parseSelections(vals []string) ([]selection, error) {
	if len(vals) == 0 {
		return nil, fairrelay.InvalidInput("sel", "select at least one quarantined head")
	}
	if len(vals) > maxSelected {
		return nil, fairrelay.InvalidInput("sel", "at most %d heads at once, got %d", maxSelected, len(vals))
	}
	out := make([]selection, 0, len(vals))
	for _, v := range vals {
		i := strings.LastIndexByte(v, ':')
		if i < 0 {
			return nil, fairrelay.InvalidInput("sel", "want ID:GENERATION, got %q", v)
		}
		gen, err := strconv.ParseInt(v[i+1:], 10, 64)
		if err != nil || gen < 0 {
			return nil, fairrelay.InvalidInput("sel", "generation: want a non-negative integer, got %q", v[i+1:])
		}
		if err := fairrelay.CheckID("sel", v[:i]); err != nil {
			return nil, err
		}
		out = append(out, selection{id: v[:i], gen: gen})
	}
	return out, nil
}

// redrive redrives every selected head at the generation the page showed,
// one transaction and one audit row each; a head that changed meanwhile
// is left alone and counted.
func (s *Server) redrive(r *http.Request, operator, reason string) (string, error) {
	sels, err := parseSelections(r.PostForm["sel"])
	if err != nil {
		return "", err
	}
	ok, rejected := 0, map[string][]string{} // the ids by reason
	for _, sel := range sels {
		res, err := s.q.Redrive(r.Context(), fairrelay.RedriveParams{EventID: sel.id, ExpectedGeneration: sel.gen,
			Reason: reason, Operator: operator, At: fairrelay.AtStored})
		if errors.Is(err, fairrelay.ErrNotFound) {
			// Gone since the page was read (pruned): like a head that
			// changed meanwhile, counted, and the others still redriven.
			rejected["not_found"] = append(rejected["not_found"], sel.id)
			continue
		}
		if err != nil {
			if ok > 0 {
				return "", fmt.Errorf("redrove %d, then %s: %w", ok, sel.id, err)
			}
			return "", err
		}
		if res.Status == fairrelay.RedriveReady {
			ok++
		} else {
			rejected[res.RejectReason] = append(rejected[res.RejectReason], sel.id)
		}
	}
	msg := fmt.Sprintf("redrive: %d redriven", ok)
	for _, k := range slices.Sorted(maps.Keys(rejected)) {
		msg += fmt.Sprintf(", %d rejected (%s: %s)", len(rejected[k]), k, someIDs(rejected[k]))
	}
	return msg, nil
}

// someIDs lists the first five of ids, and how many more there are: the
// rejected heads of a bulk redrive, named so the operator can find them
// (a fresh user's report: "1 rejected (generation_mismatch)" said which
// reason, not which head).
func someIDs(ids []string) string {
	const shown = 5
	if len(ids) <= shown {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:shown], ", "), len(ids)-shown)
}

func (s *Server) expedite(r *http.Request, operator, reason string) (string, error) {
	id := r.PostFormValue("id")
	gen, err := strconv.ParseInt(r.PostFormValue("generation"), 10, 64)
	if err != nil {
		return "", fairrelay.InvalidInput("generation", "want an integer, got %q", r.PostFormValue("generation"))
	}
	res, err := s.q.Expedite(r.Context(), fairrelay.ExpediteParams{EventID: id, ExpectedGeneration: gen, Reason: reason,
		Operator: operator, At: fairrelay.AtStored})
	if err != nil {
		return "", err
	}
	return answer("expedite "+id, res), nil
}

func (s *Server) flowAction(r *http.Request, action, operator, reason string) (string, error) {
	flow := r.PostFormValue("flow")
	p := fairrelay.FlowActionParams{Flow: flow, Reason: reason, Operator: operator, At: fairrelay.AtStored}
	var res fairrelay.ActionResult
	var err error
	if action == "pause" {
		res, err = s.q.Pause(r.Context(), p)
	} else {
		res, err = s.q.Resume(r.Context(), p)
	}
	if err != nil {
		return "", err
	}
	return answer(action+" "+flow, res), nil
}

func answer(what string, res fairrelay.ActionResult) string {
	if res.Status == fairrelay.ActionRejected {
		return what + ": rejected (" + res.RejectReason + ")"
	}
	return what + ": " + string(res.Status)
}
