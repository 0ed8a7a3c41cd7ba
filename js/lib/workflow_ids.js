// M1 (#42): one key per workflow while the frontend changes its graph id. Frontend 1.49 gives a workflow
// opened from an API prompt a new graph id at its first tab switch; the runs the server kept name the id
// it had when queued. The first id a workflow (the frontend's workflow object) is seen with stays its
// key, and the later ids are aliases of it, kept in localStorage so that after F5 (the frontend restores
// the tab with the new id) the server's runs still find it. Pure apart from the storage passed in.

const MAX_ALIASES = 256;

export class WorkflowIds {
  constructor(storage = null, name = "Headroom.WorkflowAliases") {
    this.storage = storage;
    this.name = name;
    this.aliases = new Map(); // graph id -> the key its workflow was first seen with
    try {
      for (const [id, key] of JSON.parse(storage?.getItem(name) ?? "[]")) this.aliases.set(id, key);
    } catch {
      // an unreadable entry: start again
    }
  }

  /** The key for graph id `id`: itself, or the workflow's first id when it is an alias. */
  resolve(id) {
    return this.aliases.get(id) ?? id;
  }

  /** The key of the open workflow: `workflow` (the frontend's object for the tab) keeps the first key it
   * was seen with; a new graph id of the same workflow becomes an alias of that key. */
  key(id, workflow = null, graphId = id) {
    const known = this.resolve(id);
    if (!workflow || typeof workflow !== "object") return known;
    // mid-switch the graph may still be the previous tab's: only a graph the workflow's own state names
    // is that workflow's (its state is the change tracker's copy of the graph)
    const own = workflow.changeTracker?.activeState?.id ?? workflow.activeState?.id;
    if (own && graphId && own !== graphId) return known;
    const first = workflow.headroomKey;
    if (!first) {
      try {
        workflow.headroomKey = known;
      } catch {
        // a frozen object: the id is the key
      }
      return known;
    }
    if (first !== known) this.alias(id, first);
    return first;
  }

  /** Runs queued with no graph id (the nil id of an API prompt's workflow): the key of the workflow they
   * were queued from, kept like the aliases, so that after F5 the server's runs find their workflow. */
  notePrompt(promptId, key) {
    if (!promptId || this.aliases.get(`prompt:${promptId}`) === key) return;
    this.alias(`prompt:${promptId}`, key);
  }

  promptKey(promptId) {
    return promptId ? this.aliases.get(`prompt:${promptId}`) ?? null : null;
  }

  alias(id, key) {
    if (id === key) return;
    this.aliases.delete(id);
    this.aliases.set(id, key);
    while (this.aliases.size > MAX_ALIASES) this.aliases.delete(this.aliases.keys().next().value);
    try {
      this.storage?.setItem(this.name, JSON.stringify([...this.aliases]));
    } catch {
      // storage full or refused: the alias holds for this page
    }
  }
}
