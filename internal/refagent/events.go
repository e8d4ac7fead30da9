package refagent

// artifact identity of the risk assessment.
const (
	artifactID   = "risk-assessment"
	artifactName = "risk_assessment"
)
