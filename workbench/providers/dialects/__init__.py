"""The wire formats, one :class:`Dialect` object each, found by name: ``dialects.get("vercel")``.

Each module holds one format's client half (body, headers, local refusals, the answer translated
to System One) and its emulator half (the request as the service reads it, the answer and errors
as the service words them). A new format is one module here, registered below, plus its test
against the emulator (see CONTRIBUTING.md, "Adding a provider").
"""

from workbench.providers.dialects import cloudflare, openai, perplexity, systemone, vercel
from workbench.providers.dialects.base import Answer, Dialect, Error, Reject, Reply, Served, get, register, registered

# Registration order is the emulator's order of routes (on a path several formats serve, the first
# whose ``claims`` accepts the body answers).
register(systemone.SystemOne())
register(cloudflare.Cloudflare())
register(openai.OpenAIDecisions())
register(perplexity.Perplexity())
register(vercel.Vercel())

__all__ = ["Answer", "Dialect", "Error", "Reject", "Reply", "Served", "get", "register", "registered"]
