package brief

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The fake credentials below are assembled at run time so that this file
// does not itself trip secret scanners.
var (
	fakeJWT = base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"1234567890","name":"Jane"}`)) + "." +
		"SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
	fakeJWTSpaced = base64.RawURLEncoding.EncodeToString([]byte(`{ "alg": "none" }`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"x"}`)) + "."
	fakeBearer    = "4f9c2a7e1b3d5f60a8c9e2b4d6f8a0c1"
	fakeBasic     = "dXNlcjpwYXNzd29yZA=="
	fakeAKID      = "AK" + "IA" + "IOSFODNN7EXAMPLE"
	fakeASID      = "AS" + "IA" + "Q3EGRFBBQ2XNLTCE"
	fakeAWSSecret = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
	fakePEMBody   = "\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----\n"
	fakeAzureKey  = strings.Repeat("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1", 2) + "OFzFT50uSRh6IK7LvgmTH6ZqSBvw=="
	fakeGitHub    = "gh" + "p_" + "16C7e42F292c6912E7710c838347Ae178B4a"
	fakeGitHubPAT = "github" + "_pat_" + "11ABCDEFG0123456789abc_" + strings.Repeat("Zq9", 20)
	fakeSlack     = "xo" + "xb-" + "123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx"
	fakeSlackApp  = "xa" + "pp-" + "1-A0123456789-1234567890123-abcdef0123456789"
	fakeStripe    = "sk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
	fakeStripeRK  = "rk" + "_live_" + "51H8xYzAbCdEfGh0123456789"
	fakeOpenAI    = "sk" + "-proj-" + "T3BlbkFJa9Xc2Lm0Qw7Er5Ty1Ui8Op4As6Df3Gh"
	fakeAnthropic = "sk" + "-ant-api03-" + strings.Repeat("Ab3_xY9-", 11) + "AA"
	fakeGoogle    = "AI" + "za" + "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY"
	fakeNPM       = "np" + "m_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
)

// evidenceWith returns evidence holding v at /customer/notes/2.
func evidenceWith(v any) json.RawMessage {
	raw, err := json.Marshal(map[string]any{
		"case_id": "C-1",
		"customer": map[string]any{
			"tier":  "gold",
			"notes": []any{"first note", "second note", v},
		},
	})
	if err != nil {
		panic(err)
	}
	return raw
}

func TestBuildRefusesSecrets(t *testing.T) {
	const notes = "/evidence/customer/notes/2"
	cases := []struct {
		name     string
		mutate   func(*Request)
		secret   string // the credential; no 12-byte piece of it may reach the error
		field    string
		kind     SecretKind
		inMember bool
	}{
		{"jwt", note("session " + fakeJWT + " expired"), fakeJWT, notes, SecretJWT, false},
		{"jwt with spaced header and no signature", note(fakeJWTSpaced), fakeJWTSpaced, notes, SecretJWT, false},
		{"bearer token", note("sent Bearer " + fakeBearer + " to the API"), fakeBearer, notes, SecretBearerToken, false},
		{"authorization header", note("Authorization: Basic " + fakeBasic), fakeBasic, notes, SecretAuthorization, false},
		{"authorization member", func(r *Request) {
			r.Evidence = json.RawMessage(`{"request":{"headers":{"Proxy-Authorization":"Basic ` + fakeBasic + `"}}}`)
		}, fakeBasic, "/evidence/request/headers/Proxy-Authorization", SecretAuthorization, false},
		{"pem pkcs8", note("-----BEGIN PRIVATE KEY-----" + fakePEMBody), fakePEMBody[1:30], notes, SecretPrivateKey, false},
		{"pem openssh", note("-----BEGIN OPENSSH PRIVATE KEY-----" + fakePEMBody), fakePEMBody[1:30], notes, SecretPrivateKey, false},
		{"pem rsa", note("-----BEGIN RSA PRIVATE KEY-----" + fakePEMBody), fakePEMBody[1:30], notes, SecretPrivateKey, false},
		{"pem ec", note("-----BEGIN EC PRIVATE KEY-----" + fakePEMBody), fakePEMBody[1:30], notes, SecretPrivateKey, false},
		{"pem encrypted", note("-----BEGIN ENCRYPTED PRIVATE KEY-----" + fakePEMBody), fakePEMBody[1:30], notes, SecretPrivateKey, false},
		{"pem pgp", note("-----BEGIN PGP PRIVATE KEY BLOCK-----" + fakePEMBody), fakePEMBody[1:30], notes, SecretPrivateKey, false},
		{"aws access key id", note("key " + fakeAKID + " in us-east-1"), fakeAKID, notes, SecretAWSAccessKeyID, false},
		{"aws session key id", note(fakeASID), fakeASID, notes, SecretAWSAccessKeyID, false},
		{"aws secret labelled inline", note("aws_secret_access_key = " + fakeAWSSecret), fakeAWSSecret, notes, SecretAWSSecretAccessKey, false},
		{"aws secret camel case label", note(`{"awsSecretAccessKey":"` + fakeAWSSecret + `"}`), fakeAWSSecret, notes, SecretAWSSecretAccessKey, false},
		{"aws secret member", func(r *Request) {
			r.Evidence = json.RawMessage(`{"aws":{"region":"eu-west-1","AWS_SECRET_ACCESS_KEY":"` + fakeAWSSecret + `"}}`)
		}, fakeAWSSecret, "/evidence/aws/AWS_SECRET_ACCESS_KEY", SecretAWSSecretAccessKey, false},
		{"gcp service account", note(`{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----` + fakePEMBody + `"}`),
			fakePEMBody[1:30], notes, SecretGCPServiceAccount, false},
		{"azure connection string", note("DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=" + fakeAzureKey + ";EndpointSuffix=core.windows.net"),
			fakeAzureKey, notes, SecretAzureStorageKey, false},
		{"github classic", note("token=" + fakeGitHub), fakeGitHub, notes, SecretGitHubToken, false},
		{"github fine-grained", note(fakeGitHubPAT), fakeGitHubPAT, notes, SecretGitHubToken, false},
		{"slack bot", note(fakeSlack), fakeSlack, notes, SecretSlackToken, false},
		{"slack app", note(fakeSlackApp), fakeSlackApp, notes, SecretSlackToken, false},
		{"stripe secret", note(fakeStripe), fakeStripe, notes, SecretStripeKey, false},
		{"stripe restricted", note(fakeStripeRK), fakeStripeRK, notes, SecretStripeKey, false},
		{"openai", note("OPENAI_API_KEY=" + fakeOpenAI), fakeOpenAI, notes, SecretOpenAIKey, false},
		{"anthropic", note(fakeAnthropic), fakeAnthropic, notes, SecretAnthropicKey, false},
		{"google api key", note("https://maps.example/api?key=" + fakeGoogle), fakeGoogle, notes, SecretGoogleAPIKey, false},
		{"npm", note("//registry.npmjs.org/:_authToken=" + fakeNPM), fakeNPM, notes, SecretNPMToken, false},
		{"card spaced", note("paid with 4111 1111 1111 1111 exp 12/27"), "4111 1111 1111 1111", notes, SecretCardNumber, false},
		{"card hyphenated", note("card 5500-0055-5555-5559."), "5500-0055-5555-5559", notes, SecretCardNumber, false},
		{"card amex groups", note("3782 822463 10005"), "3782 822463 10005", notes, SecretCardNumber, false},
		{"card plain", note("6011000990139424"), "6011000990139424", notes, SecretCardNumber, false},
		{"card as integer", func(r *Request) { r.Evidence = json.RawMessage(`{"pan":4242424242424242}`) }, "4242424242424242", "/evidence/pan", SecretCardNumber, false},
		{"escaped secret", func(r *Request) {
			r.Evidence = json.RawMessage(`{"a":"\u0067hp_` + fakeGitHub[4:] + `"}`)
		}, fakeGitHub[4:], "/evidence/a", SecretGitHubToken, false},
		{"member name", func(r *Request) {
			r.Evidence = json.RawMessage(`{"customer":{"tier":"gold","` + fakeGitHub + `":true}}`)
		}, fakeGitHub, "/evidence/customer", SecretGitHubToken, true},
		{"member name at the root", func(r *Request) {
			r.Evidence = json.RawMessage(`{"` + fakeNPM + `":1}`)
		}, fakeNPM, "/evidence", SecretNPMToken, true},
		{"pointer escapes ~ and /", func(r *Request) {
			r.Evidence = json.RawMessage(`{"a/b~c":[0,{"d":"` + fakeSlack + `"}]}`)
		}, fakeSlack, "/evidence/a~1b~0c/1/d", SecretSlackToken, false},
		{"objective", func(r *Request) { r.Objective = "Use " + fakeStripe + " to refund." }, fakeStripe, "/objective", SecretStripeKey, false},
		{"constraint", func(r *Request) { r.Constraints = []string{"Be brief.", "Call with Bearer " + fakeBearer} },
			fakeBearer, "/constraints/1", SecretBearerToken, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := req()
			c.mutate(&r)
			_, err := Build(r, schema, Limits{})
			var be *Error
			if !errors.As(err, &be) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want *Error", err)
			}
			if be.Field != c.field || be.Secret != c.kind {
				t.Fatalf("field %q kind %q, want %q %q", be.Field, be.Secret, c.field, c.kind)
			}
			want := "looks like " + c.kind.phrase()
			if c.inMember {
				want = "member name " + want
			}
			if be.Reason != want {
				t.Fatalf("reason %q, want %q", be.Reason, want)
			}
			if piece, ok := leaked(err.Error(), c.secret); ok {
				t.Fatalf("error %q leaks %q", err, piece)
			}
		})
	}
}

func note(s string) func(*Request) {
	return func(r *Request) { r.Evidence = evidenceWith(s) }
}

// leaked returns a 12-byte piece of secret found in msg (all of secret if it
// is shorter).
func leaked(msg, secret string) (string, bool) {
	n := min(12, len(secret))
	for i := 0; i+n <= len(secret); i++ {
		if strings.Contains(msg, secret[i:i+n]) {
			return secret[i : i+n], true
		}
	}
	return "", false
}

func TestBuildAcceptsLookalikes(t *testing.T) {
	cases := map[string]string{
		"uuid":                    "3f2504e0-4f89-11d3-9a0c-0305e82c3301",
		"sha256 digest":           "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		"md5 hex":                 "d41d8cd98f00b204e9800998ecf8427e",
		"base64 image":            "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
		"long base64 with ey":     "QUJDeyJhbGciOiJIUzI1NiJ9" + strings.Repeat("QUJD", 20),
		"dotted base64 no alg":    base64.RawURLEncoding.EncodeToString([]byte(`{"typ":"JWT","kid":"k1"}`)) + ".e30.c2ln",
		"version and hostname":    "eyewear.example.com v1.2.3",
		"iso dates":               "2024-03-15T10:30:00Z to 2024-03-16 14:05",
		"phone numbers":           "+1 415-555-2671, +44 20 7946 0958, 0049 1512 3456 7890",
		"order number fails luhn": "order 4111111111111112 shipped",
		"order number not a card": "order 1234567812345670 shipped", // passes Luhn, starts with 1
		"one repeated digit":      "6666666666666",
		"too long digit run":      "41111111111111111111111",
		"decimal fraction":        "pi is 3.4111111111111111",
		"masked card":             "**** **** **** 4242",
		"small groups":            "4 1 1 1 1 1 1 1 1 1 1 1 1 1 1 1",
		"bearer in prose":         "The bearer of this gift card may not request a cash refund; use bearer authentication.",
		"bearer placeholder":      "Authorization: Bearer <YOUR_TOKEN>",
		"authorization in prose":  "Authorization: pending approval by the account manager",
		"sk- in words":            "task-sk-1 risk-score disk-usage sk-learn-based-classifier-for-fraud-detection",
		"ghp without token":       "ghp_ is GitHub's prefix; so is github_pat_",
		"aws example word":        "AKIA is the prefix of an access key id",
		"unlabelled 40 chars":     "commit " + strings.Repeat("a1b2c3d4e5", 4),
		"redacted labels":         "aws_secret_access_key=<redacted> AccountKey=*** private_key: null",
		"private_key_id":          `"private_key_id": "-----BEGIN is not here`,
		"public pem":              "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
		"certificate":             "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
		"slack word":              "xoxb- tokens are rotated monthly",
	}
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			r := req()
			r.Evidence = evidenceWith(s)
			r.Objective = "Assess: " + s
			if _, err := Build(r, schema, Limits{}); err != nil {
				t.Fatalf("refused %q: %v", s, err)
			}
		})
	}
	t.Run("fixture", func(t *testing.T) {
		r := req()
		r.Evidence = readFixture(t)
		if _, err := Build(r, schema, Limits{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("member named authorization holding prose", func(t *testing.T) {
		r := req()
		r.Evidence = json.RawMessage(`{"authorization":"granted by the duty manager","secret_access_key":"unknown"}`)
		if _, err := Build(r, schema, Limits{}); err != nil {
			t.Fatal(err)
		}
	})
}

func readFixture(tb testing.TB) json.RawMessage {
	raw, err := os.ReadFile("testdata/evidence_refund.json")
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

func TestFindSecret(t *testing.T) {
	doc := []byte(`{"parts":[{"text":"ok"},{"data":{"` + fakeGitHub + `":1}}],"n":4111111111111111}`)
	s, found, err := FindSecret(doc)
	if err != nil || !found || s != (Secret{Pointer: "/parts/1/data", Kind: SecretGitHubToken, InName: true}) {
		t.Fatalf("FindSecret = %+v %v %v", s, found, err)
	}
	if _, found, err := FindSecret(readFixture(t)); found || err != nil {
		t.Fatalf("fixture: found %v, err %v", found, err)
	}
	if s, found, _ := FindSecret([]byte(`"` + fakeAKID + `"`)); !found || s.Pointer != "" {
		t.Fatalf("root string: %+v %v", s, found)
	}
	// Numbers are checked, never decoded: any JSON number is accepted.
	for _, good := range []string{`{"n":-0.5e-3,"m":12345678901234567890,"e":1E+400,"z":0}`, `[]`, `"\ud83d\ude00\ud800"`, ` null `} {
		if _, found, err := FindSecret([]byte(good)); err != nil || found {
			t.Errorf("FindSecret(%s): found %v, err %v", good, found, err)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1,}`, `[1 2]`, `{"a":"\x"}`, "\"a\nb\"", `01`, `1.`, `-`, `tru`, `{} {}`, `{"a":"\ud800"`, `{"` + fakeNPM + `":1`} {
		if _, _, err := FindSecret([]byte(bad)); err == nil {
			t.Errorf("FindSecret(%q): no error", bad)
		}
	}
	if k, ok := FindSecretInText("key=" + fakeGoogle); !ok || k != SecretGoogleAPIKey {
		t.Fatalf("FindSecretInText = %q %v", k, ok)
	}
}

// TestFindSecretAgreesWithEncodingJSON pins the walker's syntax check,
// including the nesting bound, to encoding/json's.
func TestFindSecretAgreesWithEncodingJSON(t *testing.T) {
	for _, depth := range []int{maxScanDepth, maxScanDepth + 1} {
		doc := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		_, _, err := FindSecret(doc)
		if (err == nil) != json.Valid(doc) {
			t.Errorf("depth %d: FindSecret err %v, json.Valid %v", depth, err, json.Valid(doc))
		}
	}
}

// adversarialUnits are near-misses of each detector; repeated over 60 KB
// they once made the scan quadratic (0.4 s). BenchmarkScanAdversarial
// measures them (docs/performance.md); tests never assert on time.
var adversarialUnits = []string{"ey-", "eyJ4IjoxfQ.a ", "sk-", "sk-ant-", "xoxb-", "AIz-", "github_pat_-", "ghp_a-", "npm_",
	"AKIA", "Bearer ", "authorization:", "accountkey=", "aws_secret_access_key=", "private_key:", "-----BEGIN ", "222 ", "6666666666666-"}

func adversarialDoc(unit string) []byte {
	return []byte(`{"a":"` + strings.Repeat(unit, 60000/len(unit)) + `"}`)
}

// Near-misses repeated over 60 KB are not secrets.
func TestAdversarialNearMissesAreNotSecrets(t *testing.T) {
	for _, unit := range adversarialUnits {
		if _, found, err := FindSecret(adversarialDoc(unit)); found || err != nil {
			t.Errorf("%q: found %v, err %v", unit, found, err)
		}
	}
}

func BenchmarkScanAdversarial(b *testing.B) {
	for _, unit := range adversarialUnits {
		doc := adversarialDoc(unit)
		b.Run(strings.Trim(unit, " :-="), func(b *testing.B) {
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				_, _, _ = FindSecret(doc)
			}
		})
	}
}

func TestBuildLimits(t *testing.T) {
	nest := func(levels int) json.RawMessage { // levels of objects, the evidence being the first
		return json.RawMessage(strings.Repeat(`{"a":`, levels-1) + "{}" + strings.Repeat("}", levels-1))
	}
	members := func(n int) json.RawMessage { // one member holding n-1 elements
		return json.RawMessage(`{"a":[` + strings.Repeat("0,", n-2) + "0]}")
	}
	sized := func(n int) json.RawMessage { return json.RawMessage(`{"a":"` + strings.Repeat("x", n-8) + `"}`) }
	cases := []struct {
		name   string
		lim    Limits
		mutate func(*Request)
		field  string // "" for accepted
		reason string
	}{
		{"depth at default", Limits{}, func(r *Request) { r.Evidence = nest(32) }, "", ""},
		{"depth over default", Limits{}, func(r *Request) { r.Evidence = nest(33) },
			"/evidence" + strings.Repeat("/a", 32), "evidence nests deeper than 32 levels"},
		{"depth in arrays", Limits{MaxEvidenceDepth: 3}, func(r *Request) { r.Evidence = json.RawMessage(`{"a":[[1],[[2]]]}`) },
			"/evidence/a/1/0", "evidence nests deeper than 3 levels"},
		{"keys at default", Limits{}, func(r *Request) { r.Evidence = members(4096) }, "", ""},
		{"keys over default", Limits{}, func(r *Request) { r.Evidence = members(4097) },
			"/evidence", "evidence has more than 4096 object members and array elements"},
		{"keys set", Limits{MaxEvidenceKeys: 3}, func(r *Request) { r.Evidence = json.RawMessage(`{"a":1,"b":{"c":2,"d":3}}`) },
			"/evidence", "evidence has more than 3 object members and array elements"},
		{"limit wins over an earlier secret", Limits{MaxEvidenceDepth: 2}, func(r *Request) {
			r.Evidence = json.RawMessage(`{"k":"` + fakeNPM + `","a":{"b":{}}}`)
		}, "/evidence/a/b", "evidence nests deeper than 2 levels"},
		{"limit under a member name that is a secret", Limits{MaxEvidenceDepth: 2}, func(r *Request) {
			r.Evidence = json.RawMessage(`{"` + fakeNPM + `":{"b":{}}}`)
		}, "/evidence", "evidence nests deeper than 2 levels"},
		{"objective at default", Limits{}, func(r *Request) { r.Objective = strings.Repeat("o", 4096) }, "", ""},
		{"objective over default", Limits{}, func(r *Request) { r.Objective = strings.Repeat("o", 4097) }, "/objective", "longer than 4096 bytes"},
		{"evidence at default", Limits{}, func(r *Request) { r.Evidence = sized(65536) }, "", ""},
		{"evidence over default", Limits{}, func(r *Request) { r.Evidence = sized(65537) }, "/evidence", "larger than 65536 bytes"},
		{"evidence over set", Limits{MaxEvidenceBytes: 100}, func(r *Request) { r.Evidence = sized(101) }, "/evidence", "larger than 100 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := req()
			c.mutate(&r)
			_, err := Build(r, schema, c.lim)
			if c.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var be *Error
			if !errors.As(err, &be) || be.Field != c.field || be.Reason != c.reason {
				t.Fatalf("err = %v, want %s: %s", err, c.field, c.reason)
			}
		})
	}
	if got := len(sized(65536)); got != 65536 {
		t.Fatalf("sized(65536) is %d bytes", got)
	}
}

// FuzzFindSecret checks the walker's syntax check against encoding/json and
// that a hit is reported with a pointer that resolves in the document.
func FuzzFindSecret(f *testing.F) {
	f.Add([]byte(`{"a":[1,"x",{"b":null}],"c":-1.5e3}`))
	f.Add([]byte(`{"k~/":["Authorization: Basic ` + fakeBasic + `"]}`))
	f.Add([]byte(`"\ud83d\ude00 \ud800 \u00e9"`))
	f.Add([]byte(`{"a":"b"`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		s, found, err := FindSecret(doc)
		if (err == nil) != json.Valid(doc) {
			t.Fatalf("FindSecret err %v, json.Valid %v", err, json.Valid(doc))
		}
		if !found || !utf8.Valid(doc) { // encoding/json replaces bad UTF-8 in names
			return
		}
		var v any
		if err := json.Unmarshal(doc, &v); err != nil {
			t.Fatal(err)
		}
		if _, ok := resolve(v, s.Pointer); !ok {
			t.Fatalf("pointer %q does not resolve", s.Pointer)
		}
	})
}

// resolve follows the JSON pointer p in the decoded document v.
func resolve(v any, p string) (any, bool) {
	if p == "" {
		return v, true
	}
	for _, tok := range strings.Split(p[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func BenchmarkScanEvidence(b *testing.B) {
	clean := readFixture(b)
	// The last string of the document, three levels down: the whole
	// document is read before the hit.
	withSecret := []byte(strings.Replace(string(clean), "cash refund.", "cash refund. "+fakeGitHub, 1))
	for _, bc := range []struct {
		name  string
		doc   []byte
		found bool
	}{{"clean", clean, false}, {"secret_deep", withSecret, true}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.doc)))
			b.ReportAllocs()
			for b.Loop() {
				if s, found, err := FindSecret(bc.doc); err != nil || found != bc.found || (found && s.Pointer != "/policy/clauses/2") {
					b.Fatal(s, found, err)
				}
			}
		})
	}
}

func BenchmarkBuildFixture(b *testing.B) {
	r := req()
	r.Evidence = readFixture(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(r, schema, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
