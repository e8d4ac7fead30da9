package agentcard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// WellKnownPath is where an agent serves its card on its origin: A2A 1.0
// §8.2 "Discovery Mechanisms" (the well-known URI, registered in §14.3).
const WellKnownPath = "/.well-known/agent-card.json"

// Fetch bounds.
const (
	FetchTimeout     = 10 * time.Second
	MaxRedirects     = 3
	DefaultRefresh   = 5 * time.Minute    // when the response says nothing usable
	MinRefresh       = 1 * time.Second    // floor under a Cache-Control max-age
	MaxRefresh       = 24 * time.Hour     // ceiling over it
	NoCacheRefresh   = 30 * time.Second   // Cache-Control no-cache or no-store
	fetchAcceptTypes = "application/json" // also +json types
)

// ErrFetch wraps every failure to fetch a card (network, status, limits).
var ErrFetch = errors.New("agentcard: fetch")

// Fetched is the outcome of one Fetch.
type Fetched struct {
	// Card is the card's bytes (nil when NotModified).
	Card []byte
	// NotModified means the server answered 304 to If-None-Match: the card
	// last fetched is still current.
	NotModified bool
	// ETag is the validator to send next time ("" if the server gave none).
	ETag string
	// Next is when to fetch again: from Cache-Control max-age (bounded by
	// MinRefresh and MaxRefresh), else DefaultRefresh from now.
	Next time.Time
}

// Fetcher fetches agent cards over HTTP(S). Its zero value is usable.
type Fetcher struct {
	// Client is the HTTP client; nil means one with FetchTimeout that follows
	// at most MaxRedirects redirects, each to https (or to loopback).
	Client *http.Client
}

// Fetch GETs the card at rawURL with `A2A-Version: 1.0` and, when etag is
// set, `If-None-Match`. The URL must be https, or http on a loopback host.
// The answer must be 200 (or 304), of a JSON content type, at most
// MaxCardBytes. Errors wrap ErrFetch. It does not parse the card.
func (f *Fetcher) Fetch(ctx context.Context, rawURL, etag string) (*Fetched, error) {
	if err := fetchable(rawURL); err != nil {
		return nil, err
	}
	client := f.Client
	if client == nil {
		client = &http.Client{Timeout: FetchTimeout, CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > MaxRedirects {
				return fmt.Errorf("%w: more than %d redirects", ErrFetch, MaxRedirects)
			}
			return fetchable(req.URL.String())
		}}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	req.Header.Set("A2A-Version", "1.0")
	req.Header.Set("Accept", fetchAcceptTypes)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFetch, rawURL, err)
	}
	defer resp.Body.Close()
	out := &Fetched{ETag: resp.Header.Get("ETag"), Next: next(resp.Header.Get("Cache-Control"), time.Now())}
	switch resp.StatusCode {
	case http.StatusNotModified:
		out.NotModified = true
		if out.ETag == "" {
			out.ETag = etag
		}
		return out, nil
	case http.StatusOK:
	default:
		return nil, fmt.Errorf("%w: %s answered %s", ErrFetch, rawURL, resp.Status)
	}
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return nil, fmt.Errorf("%w: %s: content type %q is not JSON", ErrFetch, rawURL, resp.Header.Get("Content-Type"))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxCardBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrFetch, rawURL, err)
	}
	if len(body) > MaxCardBytes {
		return nil, fmt.Errorf("%w: %s: card larger than %d bytes", ErrFetch, rawURL, MaxCardBytes)
	}
	out.Card = body
	return out, nil
}

// fetchable refuses URLs a2ad must not fetch a card from: see [secureScheme].
func fetchable(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("%w: %q is not an absolute URL", ErrFetch, rawURL)
	}
	if !secureScheme(u) {
		return fmt.Errorf("%w: %s: cards are fetched over https (http only on loopback)", ErrFetch, rawURL)
	}
	return nil
}

// secureScheme is where a2ad fetches cards from: https, or http on a
// loopback host (local agents, tests).
func secureScheme(u *url.URL) bool {
	switch u.Scheme {
	case "https":
		return true
	case "http":
		h := u.Hostname()
		ip := net.ParseIP(h)
		return h == "localhost" || (ip != nil && ip.IsLoopback())
	}
	return false
}

// CardURLError reports a card location that [CardURL] refuses. URL is the
// location as configured, with any password redacted ("" if it does not
// parse as a URL).
type CardURLError struct {
	URL    string
	Reason string
}

// Error returns "agentcard: card URL <quoted url>: <reason>".
func (e *CardURLError) Error() string {
	return fmt.Sprintf("agentcard: card URL %q: %s", e.URL, e.Reason)
}

// CardURL resolves an operator-configured card location, such as
// [AgentConfig].CardURL, to the URL [Fetcher.Fetch] GETs. A2A 1.0 §8.2
// "Discovery Mechanisms" names two ways to find a card by URL: the
// well-known URI on the agent's domain, and a pre-configured card URL.
// So an absolute URL with an empty path or "/" names the agent's origin,
// and CardURL returns [WellKnownPath] on it (scheme://host[:port] +
// WellKnownPath); a URL with any other path is the card's own and comes
// back exactly as given.
//
// It refuses, as a *[CardURLError]: a location that does not parse, or is
// not absolute (no scheme or no host); a scheme other than https, except
// http on a loopback host, as Fetch does; user info (credentials do not
// belong in configuration); a fragment; and a query on an origin, which
// the well-known URI does not take.
func CardURL(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // ue.Error repeats the URL, password and all
		}
		return "", &CardURLError{Reason: "not a URL: " + err.Error()}
	}
	refuse := func(reason string) (string, error) {
		return "", &CardURLError{URL: u.Redacted(), Reason: reason}
	}
	switch {
	case u.Scheme == "" || u.Host == "":
		return refuse("not an absolute URL (want https://host[:port][/path])")
	case !secureScheme(u):
		return refuse("scheme must be https (http only on a loopback host)")
	case u.User != nil:
		return refuse("must not carry user info")
	case strings.Contains(s, "#"):
		return refuse("must not have a fragment")
	case u.Path != "" && u.Path != "/":
		return s, nil
	case u.RawQuery != "" || u.ForceQuery:
		return refuse("an origin takes no query (give the card's full URL instead)")
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: WellKnownPath}).String(), nil
}

// next is when to fetch again after a response with this Cache-Control.
func next(cacheControl string, now time.Time) time.Time {
	for d := range strings.SplitSeq(cacheControl, ",") {
		d = strings.TrimSpace(strings.ToLower(d))
		if v, ok := strings.CutPrefix(d, "max-age="); ok {
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				return now.Add(min(max(time.Duration(n)*time.Second, MinRefresh), MaxRefresh))
			}
		}
		if d == "no-cache" || d == "no-store" {
			return now.Add(NoCacheRefresh)
		}
	}
	return now.Add(DefaultRefresh)
}
