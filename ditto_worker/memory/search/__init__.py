"""The search pipeline every store and RETRIEVAL share (MEM-RET, MEM-SEARCH).

It sits in the SDK's layer, below the store plugins and the RETRIEVAL worker, so both
reach it downward: a store's native ``hybrid`` (:mod:`ditto_worker.memory.native`) and
RETRIEVAL.SEARCH (:mod:`ditto_worker.retrieval.search`) run the same stages and rank
alike. Nothing here loads a model. This ``__init__`` imports nothing; modules:

* :mod:`.pipeline` — the stages as plain functions, :func:`~.pipeline.run_pipeline`;
* :mod:`.fusion` — weighted / rrf fusion and what the fused score means;
* :mod:`.scoring` — metadata mentions and neighbourhood context;
* :mod:`.settings` — ``RetrievalConfig`` (``ditto.yaml`` pipeline settings);
* :mod:`.metric` — the ``options.metric`` check of a vector search.

The old paths ``ditto_worker.retrieval.pipeline`` / ``.fusion`` / ``.context`` /
``.settings`` re-export these names.
"""
