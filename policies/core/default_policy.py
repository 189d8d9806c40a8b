"""The default policy of SPEC P3 (seed 004): reading and drafting run on their own, a formal
file changes only after its diff is confirmed, deletes and renames need a strong
confirmation, and publishing always needs a person. Secrets and git internals are denied."""

from __future__ import annotations

from typing import Final

from .permissions import Policy, Rule

DEFAULT_POLICY_NAME: Final = "default"

DEFAULT_RULES: Final[tuple[Rule, ...]] = (
    Rule("deny-git", "*", "deny", ".git/**", "git internals are never touched"),
    Rule(
        "deny-secrets",
        "*",
        "deny",
        "{**/.env,**/.env.*,**/*.pem,**/*.key,**/id_rsa*,**/id_ed25519*}",
        "files that hold secrets are never read or written",
    ),
    Rule(
        "read",
        "{searchDocs,readSource,glob,grep,runValidation,requestApproval}",
        "allow",
        "",
        "reading is automatic",
    ),
    Rule("drafts", "{createDraft,patchDraft}", "allow", "", "writing drafts is automatic"),
    Rule(
        "modify", "commitDraft", "ask", "", "modifying a formal file: show the diff, then confirm"
    ),
    Rule(
        "delete-rename",
        "{deleteFile,renameFile}",
        "ask_strong",
        "",
        "deleting or renaming: strong confirmation (type the path)",
    ),
    Rule("publish", "publish", "ask", "", "publishing, deploying, sending: always a person"),
    Rule("mcp", "mcp:*", "ask", "", "external tools ask until an admin allows them"),
    Rule("shell", "dangerous", "ask_strong", "", "raw shell: strong confirmation, L3 only"),
)

# Ceiling L3: deletes and the shell are L3 (SPEC P1) and must reach their strong confirmation.
DEFAULT_POLICY: Final = Policy(DEFAULT_POLICY_NAME, "L3", DEFAULT_RULES)
