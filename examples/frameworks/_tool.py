"""The tool every example shares: a search with canned answers (no network)."""


def search(query: str) -> str:
    """Search the web for a query.

    Args:
        query: what to search for
    """
    return f"3 results for {query}"
