"""Where the operator's tests find the repository's parts (a module of its own:
`from conftest import ...` would pick whichever test folder's conftest was
imported first)."""

import os

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
OPERATOR = os.path.join(REPO, "target", "debug", "oxray-operator")
CHART = os.path.join(REPO, "deploy", "helm", "oxray-operator")
EXAMPLES = os.path.join(REPO, "deploy", "examples")
TOOLS = os.path.join(REPO, "build", "tools")
