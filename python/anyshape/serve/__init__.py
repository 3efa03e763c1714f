"""Serving compiled artifacts over HTTP: OpenAI's API (``openai_api``), a
server for one artifact (``app.ModelServer``) with the engines that batch its
requests (``engine``), and its replicas on Ray Serve (``ray_app``, which needs
``pip install anyshape[serve]``). ``anyshape-serve`` runs them."""
