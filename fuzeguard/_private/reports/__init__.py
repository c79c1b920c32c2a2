"""After a run: replay of traces, stop reports (text and HTML) and advice."""
