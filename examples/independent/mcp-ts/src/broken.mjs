// One deliberately broken behaviour at a time: MCPTS_BROKEN=<name> (or --broken NAME); see variants.json.
export function brokenName() { return process.env.MCPTS_BROKEN || ''; }
export function broken(name) { return brokenName() === name; }
