package agentcard_test

import (
	"fmt"
	"os"

	"github.com/a2ad/a2ad/agentcard"
)

func ExampleParse() {
	raw, err := os.ReadFile("../testdata/cards/fraud-review.json")
	if err != nil {
		panic(err)
	}
	card, err := agentcard.Parse(raw)
	if err != nil {
		panic(err)
	}
	in, _ := agentcard.NATSInterface(card)
	skill, _ := card.Skill("assess_refund_risk")
	fmt.Println(card.Name, card.Version)
	fmt.Println(in.URL)
	fmt.Println(skill.Name, skill.Tags)
	// Output:
	// Fraud Review Agent 1.0.0
	// nats://127.0.0.1:4222/a2a.agent.fraud-review
	// Assess refund risk [fraud refunds risk]
}

func ExampleParse_refused() {
	_, err := agentcard.Parse([]byte(`{"name": "Agent", "url": "https://agent.example/a2a"}`))
	fmt.Println(err)
	// Output:
	// agentcard: /url: unknown field
}

func ExampleFingerprint() {
	a, _ := agentcard.Fingerprint([]byte(`{"name": "Agent", "version": "1.0.0"}`))
	b, _ := agentcard.Fingerprint([]byte(`{"version":"1.0.0","name":"Agent","signatures":[]}`))
	fmt.Println(a == b)
	fmt.Println(a)
	// Output:
	// true
	// sha256:7d2dcc9860a7e1b64bf7d82fd74fbda53e9644d21e0307c64b724a505fc31952
}

func ExampleCardURL() {
	for _, loc := range []string{"https://agent.example.com", "https://cards.example.com/fraud-review.json", "http://agent.example.com"} {
		fmt.Println(agentcard.CardURL(loc))
	}
	// Output:
	// https://agent.example.com/.well-known/agent-card.json <nil>
	// https://cards.example.com/fraud-review.json <nil>
	//  agentcard: card URL "http://agent.example.com": scheme must be https (http only on a loopback host)
}
