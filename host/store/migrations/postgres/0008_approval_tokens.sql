-- The token an MCP client over HTTP authenticated with when its call asked a question (none:
-- `cordon mcp` on stdio): whose question it is, so that token sees it and answering it needs
-- `approve:own` there and `approve` elsewhere, as for a session's questions.
ALTER TABLE approvals ADD COLUMN token TEXT;
