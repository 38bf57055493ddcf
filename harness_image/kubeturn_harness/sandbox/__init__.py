"""The toolbox: where every Agent's tools run, apart from the Harness and its secrets.

``server`` forks a ``worker`` per session, which confines itself (``confinement``,
``landlock``, rlimits) and ends every process it started (``reaper``); ``clones`` is
kubeturn's own git on the Workspace's tree; ``client`` is the Harness's side, and
``protocol`` the messages between them. Imports neither aiohttp nor a model SDK.
"""
