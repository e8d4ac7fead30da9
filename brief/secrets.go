package brief

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// SecretKind names one secret detector. The values are stable: hosts, logs
// and tests may match them.
type SecretKind string

// The detectors. Each matches a credential format, not a word: a bare
// "Bearer" in prose or an order number that fails the Luhn check is not a
// secret. Prefixed tokens count only where a token starts — after a blank,
// quote, "=", ":" and the like, not after a letter, digit, "-" or "_" — so
// "task-sk-1" or "risk-sk-…" is not an OpenAI key.
const (
	// SecretJWT is a JWS or JWE in compact form: base64url segments joined by
	// dots, the first decoding to a JSON object with an "alg" member.
	SecretJWT SecretKind = "jwt"
	// SecretBearerToken is "Bearer " followed by a token of 20 or more
	// token68 characters holding both letters and digits.
	SecretBearerToken SecretKind = "bearer_token"
	// SecretAuthorization is an Authorization header value, after
	// "Authorization:" or "=" or as the value of an object member named
	// Authorization or Proxy-Authorization: a known scheme (Basic, Bearer,
	// Token …), a blank and a credential of 8 or more token68 characters, or
	// a lone credential of 16 or more; either must look generated (letters
	// with digits, an upper-case letter after the first, or "=" padding).
	SecretAuthorization SecretKind = "authorization_header"
	// SecretPrivateKey is a PEM block header "-----BEGIN … PRIVATE KEY-----"
	// (PKCS#8, RSA, EC, DSA, OPENSSH, ENCRYPTED, PGP …).
	SecretPrivateKey SecretKind = "private_key"
	// SecretAWSAccessKeyID is AKIA or ASIA followed by 16 upper-case letters
	// or digits.
	SecretAWSAccessKeyID SecretKind = "aws_access_key_id"
	// SecretAWSSecretAccessKey is a 40-character AWS secret access key, found
	// only when labelled: after "aws_secret_access_key=" or ":" (any case,
	// "_", "-" or nothing between the words), or as the value of an object
	// member so named.
	SecretAWSSecretAccessKey SecretKind = "aws_secret_access_key"
	// SecretGCPServiceAccount is the private_key member of a Google Cloud
	// service-account key file: "private_key" then ":" and "-----BEGIN".
	SecretGCPServiceAccount SecretKind = "gcp_service_account_key"
	// SecretAzureStorageKey is the AccountKey= part of an Azure storage
	// connection string, with 20 or more base64 characters.
	SecretAzureStorageKey SecretKind = "azure_storage_key"
	// SecretGitHubToken is ghp_, gho_, ghu_, ghs_ or ghr_ followed by 36 or
	// more letters and digits, or github_pat_ followed by 22 or more letters,
	// digits and underscores with a digit among them.
	SecretGitHubToken SecretKind = "github_token"
	// SecretSlackToken is xoxb-, xoxp-, xoxa-, xoxo-, xoxr-, xoxs-, xoxe- or
	// xapp- followed by 20 or more characters of [A-Za-z0-9_-] with a digit
	// among them.
	SecretSlackToken SecretKind = "slack_token"
	// SecretStripeKey is sk_live_ or rk_live_ followed by 16 or more letters
	// and digits.
	SecretStripeKey SecretKind = "stripe_key"
	// SecretOpenAIKey is sk- followed by 32 or more characters of
	// [A-Za-z0-9_-] with upper case, lower case and a digit among them.
	SecretOpenAIKey SecretKind = "openai_api_key"
	// SecretAnthropicKey is sk-ant- followed by 32 or more characters of
	// [A-Za-z0-9_-] with upper case, lower case and a digit among them.
	SecretAnthropicKey SecretKind = "anthropic_api_key"
	// SecretGoogleAPIKey is AIza followed by 35 or more characters of
	// [A-Za-z0-9_-].
	SecretGoogleAPIKey SecretKind = "google_api_key"
	// SecretNPMToken is npm_ followed by 36 or more letters and digits.
	SecretNPMToken SecretKind = "npm_token"
	// SecretCardNumber is a payment card number: 13 to 19 digits, whole or
	// in groups of three or more joined by single spaces or single hyphens,
	// starting with 2 to 6 (the card networks' ranges), not all one digit,
	// and passing the Luhn check. A JSON integer of that shape counts too.
	SecretCardNumber SecretKind = "card_number"
)

// phrase is the detector's name in an error reason.
func (k SecretKind) phrase() string {
	switch k {
	case SecretJWT:
		return "a JWT"
	case SecretBearerToken:
		return "a bearer token"
	case SecretAuthorization:
		return "an Authorization header credential"
	case SecretPrivateKey:
		return "a PEM private key"
	case SecretAWSAccessKeyID:
		return "an AWS access key id"
	case SecretAWSSecretAccessKey:
		return "an AWS secret access key"
	case SecretGCPServiceAccount:
		return "a GCP service-account private key"
	case SecretAzureStorageKey:
		return "an Azure storage account key"
	case SecretGitHubToken:
		return "a GitHub token"
	case SecretSlackToken:
		return "a Slack token"
	case SecretStripeKey:
		return "a Stripe secret key"
	case SecretOpenAIKey:
		return "an OpenAI API key"
	case SecretAnthropicKey:
		return "an Anthropic API key"
	case SecretGoogleAPIKey:
		return "a Google API key"
	case SecretNPMToken:
		return "an npm token"
	case SecretCardNumber:
		return "a payment card number"
	}
	return "a secret"
}

// Secret locates a credential found by [FindSecret]. It never holds the
// credential nor any part of it.
type Secret struct {
	// Pointer is the RFC 6901 JSON pointer, relative to the scanned
	// document, of the string (or integer) holding the credential. When
	// InName is set it points at the object one of whose member names is
	// the credential: the name is left out because it is the secret.
	//
	// Every member name on the path has itself been scanned before the
	// walk descended under it, so the pointer carries no detected secret.
	Pointer string
	Kind    SecretKind
	InName  bool
}

// reason is the *Error reason for s: it names the detector and never quotes
// the value.
func (s Secret) reason() string {
	if s.InName {
		return "member name looks like " + s.Kind.phrase()
	}
	return "looks like " + s.Kind.phrase()
}

// maxScanDepth bounds the nesting [FindSecret] accepts; it matches
// encoding/json and the canonicalizer.
const maxScanDepth = 10000

// FindSecret scans the JSON document doc in one pass — every member name,
// every string (escapes decoded) and every integer that could be a card
// number — and reports the first credential in document order. It returns
// an error, and no Secret, when doc is not exactly one valid JSON value or
// nests deeper than 10000 levels. Use it for documents a host or agent
// supplies outside a brief, such as artifacts; [Build] runs the same scan on
// the evidence.
func FindSecret(doc []byte) (Secret, bool, error) {
	w := walk{doc: doc, maxDepth: maxScanDepth, maxItems: math.MaxInt}
	f := w.run()
	switch {
	case f == nil:
		return Secret{}, false, nil
	case f.what == faultSecret:
		return f.secret(), true, nil
	case f.what == faultDepth:
		return Secret{}, false, fmt.Errorf("brief: JSON nests deeper than %d levels", maxScanDepth)
	}
	return Secret{}, false, errNotJSON
}

var errNotJSON = errors.New("brief: not valid JSON")

// FindSecretInText reports the kind of the first credential in the text s,
// such as an objective, a constraint or a text part.
func FindSecretInText(s string) (SecretKind, bool) {
	k := scanText(s)
	return k, k != ""
}

// text is what the detectors read: a Go string or the bytes of a JSON string.
type text interface{ ~string | ~[]byte }

// Character classes, one bit each, for the detectors' inner loops.
const (
	clDigit  = 1 << iota // 0-9
	clUpper              // A-Z
	clLower              // a-z
	clB64URL             // - _ (with the three above: base64url)
	clB64                // + / (with the first three: base64)
	clTok68              // - . _ ~ + / (with the first three: RFC 7235 token68)
	clTrig               // starts a detector
	clBlank              // the space, between the words of a PEM label
)

const clAlnum = clDigit | clUpper | clLower

var class = func() (t [256]uint8) {
	for c := '0'; c <= '9'; c++ {
		t[c] |= clDigit
	}
	for c := 'A'; c <= 'Z'; c++ {
		t[c] |= clUpper
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] |= clLower
	}
	for _, c := range "-_" {
		t[c] |= clB64URL
	}
	for _, c := range "+/" {
		t[c] |= clB64
	}
	for _, c := range "-._~+/" {
		t[c] |= clTok68
	}
	t[' '] |= clBlank
	// The first byte of every detector, as dispatched in scanText.
	for _, c := range "eBbAaSspgxrn-23456" {
		t[c] |= clTrig
	}
	return t
}()

// run returns the end of the run of bytes in classes cl starting at i.
func run[T text](s T, i int, cl uint8) int {
	for i < len(s) && class[s[i]]&cl != 0 {
		i++
	}
	return i
}

// at reports whether s holds lit at i.
func at[T text](s T, i int, lit string) bool {
	return len(s)-i >= len(lit) && string(s[i:i+len(lit)]) == lit
}

// atFold reports whether s holds lit at i, ignoring ASCII case; lit is lower
// case letters, digits and punctuation.
func atFold[T text](s T, i int, lit string) bool {
	if len(s)-i < len(lit) {
		return false
	}
	for j := 0; j < len(lit); j++ {
		c := s[i+j]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lit[j] {
			return false
		}
	}
	return true
}

// skip returns the first index at or after i whose byte is not in set.
func skip[T text](s T, i int, set string) int {
	for i < len(s) && containsByte(set, s[i]) {
		i++
	}
	return i
}

func containsByte(set string, c byte) bool {
	for j := 0; j < len(set); j++ {
		if set[j] == c {
			return true
		}
	}
	return false
}

// scanText returns the kind of the first credential in s, or "".
//
// It is one pass over s: a byte that cannot start any detector costs one
// table lookup, and prefix detectors run only at a word boundary, so plain
// prose and identifiers are cheap; no regular expression is involved.
func scanText[T text](s T) SecretKind {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if class[c]&clTrig == 0 {
			continue
		}
		word := i == 0 || class[s[i-1]]&clAlnum == 0 // i starts a word
		if !word && c != 's' && c != 'S' && c != '-' {
			continue // only these detectors may start inside a word
		}
		// Prefixed tokens start only where no run of [A-Za-z0-9_-] is under
		// way: real ones follow a blank, quote, "=" or ":". No byte is then
		// read by more than one attempt of each detector, which keeps the
		// scan linear on adversarial runs like "sk-sk-sk-…".
		token := i == 0 || class[s[i-1]]&(clAlnum|clB64URL) == 0
		var k SecretKind
		switch c {
		case 'e':
			if token {
				k = jwtAt(s, i)
			}
		case 'B', 'b':
			if word {
				k = bearerAt(s, i)
			}
		case 'A', 'a':
			if word {
				k = aAt(s, i, token)
			}
		case 'S', 's':
			k = awsSecretLabelAt(s, i) // also inside words: awsSecretAccessKey
			if k == "" && token {
				k = skAt(s, i)
			}
		case 'p':
			if word {
				k = gcpAt(s, i)
			}
		case 'g':
			if token {
				k = githubAt(s, i)
			}
		case 'x':
			if token {
				k = slackAt(s, i)
			}
		case 'r':
			if token && at(s, i, "rk_live_") && run(s, i+8, clAlnum)-(i+8) >= 16 {
				k = SecretStripeKey
			}
		case 'n':
			if token && at(s, i, "npm_") && run(s, i+4, clAlnum)-(i+4) >= 36 {
				k = SecretNPMToken
			}
		case '-':
			k = pemAt(s, i)
		case '2', '3', '4', '5', '6': // a card network's first digit
			if word && (i == 0 || s[i-1] != '.') && cardAt(s, i) {
				k = SecretCardNumber
			}
		}
		if k != "" {
			return k
		}
	}
	return ""
}

// jwtAt matches a compact JWS or JWE at i: header "." payload "." and more.
// The header's base64url starts "ey" or "ew" when it encodes "{" and a quote
// or white space.
func jwtAt[T text](s T, i int) SecretKind {
	if i+1 >= len(s) || (s[i+1] != 'y' && s[i+1] != 'w') {
		return ""
	}
	const b64url = clAlnum | clB64URL
	h := run(s, i, b64url)
	if h-i < 10 || h >= len(s) || s[h] != '.' {
		return ""
	}
	p := run(s, h+1, b64url)
	if p == h+1 || p >= len(s) || s[p] != '.' {
		return ""
	}
	if h-i > 4096 { // no real header is this long; do not decode it
		return ""
	}
	header, err := base64.RawURLEncoding.DecodeString(string(s[i:h]))
	if err != nil || !bytes.Contains(header, []byte(`"alg"`)) {
		return ""
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(header, &members) != nil {
		return ""
	}
	if _, ok := members["alg"]; !ok {
		return ""
	}
	return SecretJWT
}

// bearerAt matches "Bearer" then blanks then a token of at least 20 token68
// characters with letters and digits; prose ("the bearer of", "Bearer
// authentication") has no such token.
func bearerAt[T text](s T, i int) SecretKind {
	if !atFold(s, i, "bearer") {
		return ""
	}
	j := skip(s, i+6, " \t")
	if j == i+6 {
		return ""
	}
	if tokenLike(s, j, 20, true) {
		return SecretBearerToken
	}
	return ""
}

// tokenLike reports whether a credential of at least minLen token68
// characters (and trailing "=" padding) starts at i. With strict, it must
// hold both a letter and a digit; otherwise mixed case or padding also pass.
func tokenLike[T text](s T, i, minLen int, strict bool) bool {
	end := run(s, i, clAlnum|clTok68)
	padded := end < len(s) && s[end] == '='
	if end-i < minLen {
		return false
	}
	var seen uint8
	upperAfterFirst := false
	for j := i; j < end; j++ {
		cl := class[s[j]]
		seen |= cl
		if j > i && cl&clUpper != 0 {
			upperAfterFirst = true
		}
	}
	digitsAndLetters := seen&clDigit != 0 && seen&(clUpper|clLower) != 0
	if strict {
		return digitsAndLetters
	}
	return digitsAndLetters || (upperAfterFirst && seen&clLower != 0) || padded
}

// aAt dispatches the detectors that start with A or a; token is as in
// scanText.
func aAt[T text](s T, i int, token bool) SecretKind {
	switch {
	case token && (at(s, i, "AKIA") || at(s, i, "ASIA")):
		end := run(s, i+4, clUpper|clDigit)
		if end-(i+4) == 16 && (end == len(s) || class[s[end]]&clAlnum == 0) {
			return SecretAWSAccessKeyID
		}
	case token && at(s, i, "AIza"):
		if run(s, i+4, clAlnum|clB64URL)-(i+4) >= 35 {
			return SecretGoogleAPIKey
		}
	case atFold(s, i, "authorization"):
		j := skip(s, i+13, `"' `)
		if j < len(s) && (s[j] == ':' || s[j] == '=') {
			if authValueAt(s, skip(s, j+1, `"' `)) {
				return SecretAuthorization
			}
		}
	case atFold(s, i, "accountkey"):
		j := skip(s, i+10, " ")
		if j >= len(s) || s[j] != '=' {
			return ""
		}
		j = skip(s, j+1, " ")
		if run(s, j, clAlnum|clB64)-j >= 20 {
			return SecretAzureStorageKey
		}
	}
	return ""
}

// authSchemes are HTTP authentication schemes whose credential follows one
// blank (RFC 9110 §11.4); Digest is absent because its parameters are not a
// token.
var authSchemes = []string{"basic", "bearer", "token", "negotiate", "ntlm", "apikey", "api-key", "key", "dpop", "ssws", "aws4-hmac-sha256", "jwt"}

// authValueAt matches an Authorization header value at i: a known scheme, one
// blank and a credential of 8 or more characters, or a lone credential of 16
// or more.
func authValueAt[T text](s T, i int) bool {
	end := run(s, i, clAlnum|clTok68)
	if end < len(s) && s[end] == ' ' {
		for _, scheme := range authSchemes {
			if end-i == len(scheme) && atFold(s, i, scheme) {
				return tokenLike(s, end+1, 8, false)
			}
		}
		return false
	}
	return tokenLike(s, i, 16, false)
}

// awsSecretLabelAt matches "secret_access_key" (any case; "_", "-" or
// nothing between the words), then ":" or "=", then exactly 40 characters of
// [A-Za-z0-9/+].
func awsSecretLabelAt[T text](s T, i int) SecretKind {
	if i+1 >= len(s) || s[i+1]|0x20 != 'e' || !atFold(s, i, "secret") {
		return ""
	}
	j := skip(s, i+6, "_-")
	if !atFold(s, j, "access") {
		return ""
	}
	j = skip(s, j+6, "_-")
	if !atFold(s, j, "key") {
		return ""
	}
	j = skip(s, j+3, `"' `)
	if j >= len(s) || (s[j] != ':' && s[j] != '=') {
		return ""
	}
	j = skip(s, j+1, `"' `)
	if awsSecretValue(s[j:]) {
		return SecretAWSSecretAccessKey
	}
	return ""
}

// awsSecretValue reports whether s starts with exactly 40 characters of
// [A-Za-z0-9/+], the shape of an AWS secret access key.
func awsSecretValue[T text](s T) bool {
	end := run(s, 0, clAlnum|clB64)
	return end == 40 && (end == len(s) || s[end] != '=')
}

// skAt matches sk_live_ (Stripe), sk-ant- (Anthropic) and sk- (OpenAI).
func skAt[T text](s T, i int) SecretKind {
	switch {
	case at(s, i, "sk_live_"):
		if run(s, i+8, clAlnum)-(i+8) >= 16 {
			return SecretStripeKey
		}
	case at(s, i, "sk-ant-"):
		if randomTail(s, i+7, 32) {
			return SecretAnthropicKey
		}
	case at(s, i, "sk-"):
		if randomTail(s, i+3, 32) {
			return SecretOpenAIKey
		}
	}
	return ""
}

// randomTail reports whether at least minLen characters of [A-Za-z0-9_-]
// start at i with upper case, lower case and digits among them: random, not
// a kebab-case slug.
func randomTail[T text](s T, i, minLen int) bool {
	end := run(s, i, clAlnum|clB64URL)
	if end-i < minLen {
		return false
	}
	var seen uint8
	for j := i; j < end; j++ {
		seen |= class[s[j]]
	}
	return seen&clAlnum == clAlnum
}

// gcpAt matches the private_key member of a service-account key file.
func gcpAt[T text](s T, i int) SecretKind {
	if !at(s, i, "private_key") {
		return ""
	}
	j := i + len("private_key")
	if j < len(s) && class[s[j]]&(clAlnum|clB64URL) != 0 { // private_key_id
		return ""
	}
	j = skip(s, j, `"' `)
	if j >= len(s) || (s[j] != ':' && s[j] != '=') {
		return ""
	}
	if at(s, skip(s, j+1, `"' `), "-----BEGIN") {
		return SecretGCPServiceAccount
	}
	return ""
}

// githubAt matches GitHub's prefixed tokens.
func githubAt[T text](s T, i int) SecretKind {
	if at(s, i, "github_pat_") {
		j, digit := i+11, false
		for ; j < len(s) && (class[s[j]]&clAlnum != 0 || s[j] == '_'); j++ {
			digit = digit || class[s[j]]&clDigit != 0
		}
		if j-(i+11) >= 22 && digit {
			return SecretGitHubToken
		}
		return ""
	}
	if len(s)-i < 4 || s[i+1] != 'h' || s[i+3] != '_' || !containsByte("pousr", s[i+2]) {
		return ""
	}
	if run(s, i+4, clAlnum)-(i+4) >= 36 {
		return SecretGitHubToken
	}
	return ""
}

// slackAt matches Slack's token prefixes.
func slackAt[T text](s T, i int) SecretKind {
	var j int
	switch {
	case at(s, i, "xapp-"):
		j = i + 5
	case at(s, i, "xox") && len(s)-i > 4 && s[i+4] == '-' && containsByte("abposre", s[i+3]):
		j = i + 5
	default:
		return ""
	}
	end := run(s, j, clAlnum|clB64URL)
	if end-j < 20 {
		return ""
	}
	for ; j < end; j++ {
		if class[s[j]]&clDigit != 0 {
			return SecretSlackToken
		}
	}
	return ""
}

// pemAt matches a PEM header whose label names a private key.
func pemAt[T text](s T, i int) SecretKind {
	if i+1 >= len(s) || s[i+1] != '-' || !at(s, i, "-----BEGIN ") {
		return ""
	}
	j := i + len("-----BEGIN ")
	end := run(s, j, clUpper|clDigit|clBlank)
	if end-j > 64 || !at(s, end, "-----") {
		return ""
	}
	label := s[j:end]
	for _, suffix := range []string{"PRIVATE KEY", "PRIVATE KEY BLOCK"} {
		if n := len(label) - len(suffix); n >= 0 && at(label, n, suffix) {
			return SecretPrivateKey
		}
	}
	return ""
}

// cardAt matches a payment card number starting at i (see
// [SecretCardNumber]): one run of 13 to 19 digits, or groups of three or more
// digits joined by one repeated separator, any prefix of which totals 13 to
// 19 digits and passes the checks.
func cardAt[T text](s T, i int) bool {
	var digits [19]byte
	n := 0
	var sep byte
	j := i
	for {
		start := j
		j = run(s, j, clDigit)
		g := j - start
		if g < 3 || n+g > len(digits) {
			return false
		}
		for k := start; k < j; k++ {
			digits[n] = s[k] - '0'
			n++
		}
		if n >= 13 && cardEnd(s, j) && cardDigits(digits[:n]) {
			return true
		}
		if j+1 >= len(s) || (s[j] != ' ' && s[j] != '-') || class[s[j+1]]&clDigit == 0 || (sep != 0 && s[j] != sep) {
			return false
		}
		sep = s[j]
		j++
	}
}

// cardEnd reports whether a card number may end before s[j]: not inside a
// word or a longer number, nor before a decimal fraction.
func cardEnd[T text](s T, j int) bool {
	if j == len(s) {
		return true
	}
	if class[s[j]]&clAlnum != 0 {
		return false
	}
	return s[j] != '.' || j+1 == len(s) || class[s[j+1]]&clDigit == 0
}

// cardDigits reports whether d (digit values, most significant first) is a
// plausible card number: a network's first digit, not one repeated digit,
// and a valid Luhn check digit.
func cardDigits(d []byte) bool {
	if len(d) < 13 || len(d) > 19 || d[0] < 2 || d[0] > 6 {
		return false
	}
	same := true
	sum := 0
	for k := range d {
		v := int(d[len(d)-1-k])
		if k%2 == 1 {
			v *= 2
			if v > 9 {
				v -= 9
			}
		}
		sum += v
		same = same && d[k] == d[0]
	}
	return !same && sum%10 == 0
}

// integerCard reports whether the JSON number num is an integer shaped like a
// card number; a card pasted as a number is as much a secret as a string.
func integerCard(num []byte) bool {
	if len(num) < 13 || len(num) > 19 {
		return false
	}
	var digits [19]byte
	for k, c := range num {
		if c < '0' || c > '9' {
			return false
		}
		digits[k] = c - '0'
	}
	return cardDigits(digits[:len(num)])
}
