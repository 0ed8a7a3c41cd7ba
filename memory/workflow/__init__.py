"""Reading a workflow: the graph of an API prompt or a UI workflow (subgraphs and group nodes expanded),
the node-type table, the values its links carry, and the order the host will execute it in."""
