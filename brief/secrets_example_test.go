package brief_test

import (
	"fmt"
	"strings"

	"github.com/a2ad/a2ad/brief"
)

func ExampleFindSecret() {
	token := "gh" + "p_" + strings.Repeat("x1", 18) // a fake GitHub token
	doc := []byte(`{"customer":{"notes":["called twice","pasted ` + token + `"]}}`)
	s, found, err := brief.FindSecret(doc)
	fmt.Println(s.Pointer, s.Kind, found, err)
	// Output: /customer/notes/1 github_token true <nil>
}

func ExampleBuild_secret() {
	token := "xo" + "xb-" + "1234567890-" + strings.Repeat("Ab", 12) // a fake Slack token
	_, err := brief.Build(brief.Request{
		Objective: "Assess this refund.",
		Evidence:  []byte(`{"case_id":"C-1","slack":{"bot":"` + token + `"}}`),
	}, brief.OutputSchema{Name: "risk_assessment", Document: []byte(`{}`)}, brief.Limits{})
	fmt.Println(err)
	// Output: brief: /evidence/slack/bot: looks like a Slack token
}
