"""Native integrations: each module plugs fuzeguard into one agent framework's own extension
point, so that a detection acts in the framework's terms. Each needs its framework installed
(``pip install 'fuzeguard[langchain]'`` and so on); importing one without it raises ImportError.
"""
