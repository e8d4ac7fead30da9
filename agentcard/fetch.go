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
	"slices"
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

// FetchError is every error of [Fetcher.Fetch]; it wraps [ErrFetch] and
// Err. Reason is a2ad's own words: it never quotes what the server sent
// (status text, headers, body, the target of a redirect), so that it can be
// shown wherever card text must not be, as [Refusal] does. Err, when set, is
// the cause, and may quote the server: for logs.
type FetchError struct {
	URL    string // as given to Fetch
	Reason string
	Err    error
}

// Error returns "agentcard: fetch: <url>: <reason>[: <cause>]".
func (e *FetchError) Error() string {
	s := "agentcard: fetch: " + e.URL + ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *FetchError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrFetch}
	}
	return []error{ErrFetch, e.Err}
}

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
	// at most MaxRedirects redirects, under [Fetcher.Fetch]'s rules.
	Client *http.Client
	// Transport carries the requests of the client Fetch makes when Client
	// is nil (nil: http.DefaultTransport): a proxy, or the roots of a
	// private CA, without giving up Fetch's redirect rules.
	Transport http.RoundTripper
}

// Fetch GETs the card at rawURL with `A2A-Version: 1.0` and, when etag is
// set, `If-None-Match`. The URL must be https, or http on a loopback host.
// With Client nil, a redirect may lead to another https URL, never from
// https to http, and to a loopback host only from a card URL on one. The
// answer must be 200 (or 304 to a request with If-None-Match: a 304 to
// one without, when a2ad has no card to revalidate, is a failed fetch), of
// a JSON content type, at most
// MaxCardBytes. Errors are *[FetchError]. It does not parse the card.
func (f *Fetcher) Fetch(ctx context.Context, rawURL, etag string) (*Fetched, error) {
	if err := fetchable(rawURL); err != nil {
		return nil, err
	}
	client := f.Client
	if client == nil {
		client = &http.Client{Timeout: FetchTimeout, Transport: f.Transport, CheckRedirect: checkRedirect}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, &FetchError{URL: rawURL, Reason: "not a valid request URL", Err: err}
	}
	req.Header.Set("A2A-Version", "1.0")
	req.Header.Set("Accept", fetchAcceptTypes)
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, requestError(rawURL, err)
	}
	defer resp.Body.Close()
	out := &Fetched{ETag: resp.Header.Get("ETag"), Next: next(resp.Header.Get("Cache-Control"), time.Now())}
	switch resp.StatusCode {
	case http.StatusNotModified:
		if etag == "" {
			// Nothing was asked to be revalidated: there is no card.
			return nil, &FetchError{URL: rawURL, Reason: "answered 304 Not Modified to a request without If-None-Match: no card came"}
		}
		out.NotModified = true
		if out.ETag == "" {
			out.ETag = etag
		}
		return out, nil
	case http.StatusOK:
	default:
		// The status code, not resp.Status, whose text the server chose.
		return nil, &FetchError{URL: rawURL, Reason: strings.TrimSpace(fmt.Sprintf("answered %d %s", resp.StatusCode, http.StatusText(resp.StatusCode)))}
	}
	ct := resp.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return nil, &FetchError{URL: rawURL, Reason: "content type is not JSON", Err: fmt.Errorf("Content-Type %q", truncate(ct, 128))}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxCardBytes+1))
	if err != nil {
		return nil, requestError(rawURL, err)
	}
	if len(body) > MaxCardBytes {
		return nil, &FetchError{URL: rawURL, Reason: fmt.Sprintf("card larger than %d bytes", MaxCardBytes)}
	}
	out.Card = body
	return out, nil
}

// requestError is the FetchError of a request that got no usable answer.
func requestError(rawURL string, err error) *FetchError {
	var redirect *FetchError // from checkRedirect, naming the target
	if errors.As(err, &redirect) {
		return &FetchError{URL: rawURL, Reason: redirect.Reason, Err: err}
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return &FetchError{URL: rawURL, Reason: "timed out", Err: err}
	}
	return &FetchError{URL: rawURL, Reason: "request failed", Err: err}
}

// fetchable refuses URLs a2ad must not fetch a card from: see [secureScheme].
func fetchable(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return &FetchError{URL: strconv.Quote(rawURL), Reason: "not an absolute URL"}
	}
	if !secureScheme(u) {
		return &FetchError{URL: rawURL, Reason: "cards are fetched over https (http only on loopback)"}
	}
	return nil
}

// checkRedirect is the redirect policy of Fetch's own client. Beyond
// fetchable, a redirect keeps https once there, and reaches a loopback host
// only from a card URL on one: a remote card host must not point a2ad at
// the services of its own host, which it could not reach itself.
func checkRedirect(req *http.Request, via []*http.Request) error {
	refuse := func(reason string) error { return &FetchError{URL: req.URL.Redacted(), Reason: reason} }
	switch {
	case len(via) > MaxRedirects:
		return refuse(fmt.Sprintf("more than %d redirects", MaxRedirects))
	case req.URL.Scheme != "https" && slices.ContainsFunc(via, func(r *http.Request) bool { return r.URL.Scheme == "https" }):
		return refuse("redirected from https to http")
	case !secureScheme(req.URL):
		return refuse("redirected off https (http only on loopback)")
	case thisHost(req.URL.Hostname()) && !thisHost(via[0].URL.Hostname()):
		return refuse("redirected to a loopback host")
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

// thisHost reports whether host names this machine: localhost and its
// subdomains (RFC 6761 §6.3), a loopback address, or the unspecified one,
// which a connection reaches this machine through. A name that only
// resolves to loopback is not caught: https to it fails for want of a
// certificate for the name, and http to it is refused anyway.
func thisHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && (ip.IsLoopback() || ip.IsUnspecified())
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
