package mcpedge

// delegationTool reports whether the tool named starts a delegation, that
// is returns a new task: delegate and the per-skill tools. The MCP Tasks
// extension answers a task-augmented call of such a tool with a task
// handle.
func (e *Edge) delegationTool(name string) bool {
	if name == "delegate" {
		return true
	}
	_, ok := e.skills.lookup(name)
	return ok
}
