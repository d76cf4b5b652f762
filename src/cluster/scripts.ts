/**
 * Every Redis key and Lua script of cluster mode (docs/scaling.md lists them with their sizes).
 *
 * Decisions that must hold across nodes are one script each, so Redis runs them atomically: placing a
 * session (pick the least-loaded node with room and reserve the slot), publishing a node's load, and
 * declaring a lost node's sessions terminated. Nothing here is read-then-write from a node.
 * The scripts touch keys they compute (not only KEYS[]), so they need one Redis, not Redis Cluster.
 */

export const KEY_PREFIX = 'avs:';
export const NODES_KEY = `${KEY_PREFIX}nodes`;
/** Sorted set node id → when its heartbeat expires (ms): finding lost nodes is one range query, not N lookups. */
export const BEATS_KEY = `${KEY_PREFIX}beats`;
export const nodeKey = (nodeId: string) => `${KEY_PREFIX}node:${nodeId}`;
export const reservationsKey = (nodeId: string) => `${KEY_PREFIX}resv:${nodeId}`;
export const sessionKey = (sessionId: string) => `${KEY_PREFIX}s:${sessionId}`;
export const nodeSessionsKey = (nodeId: string) => `${KEY_PREFIX}ns:${nodeId}`;
/** Routing slot n → the live node holding it (src/cluster/slots.ts), with the node's TTL. */
export const slotKey = (slot: number) => `${KEY_PREFIX}slot:${slot}`;
/** The cluster secret internal headers are signed with (src/cluster/internal-auth.ts), created once (SET NX). */
export const SECRET_KEY = `${KEY_PREFIX}secret`;
/** Avatar catalog of cluster mode: hash avatar id → manifest JSON (src/cluster/avatar-catalog.ts). */
export const AVATARS_KEY = `${KEY_PREFIX}avatars`;
/** Pub/sub channel: `{node, sessions}` when a lost node's sessions were terminated. */
export const LOST_CHANNEL = `${KEY_PREFIX}lost`;
export const VOICE_COUNTER_KEY = `${KEY_PREFIX}voices:counter`;
export const VOICES_KEY = `${KEY_PREFIX}voices`;
export const DEFAULTS_KEY = `${KEY_PREFIX}defaults`;
/** BullMQ's own key prefix (its keys are `avs-bull:offline:*`). */
export const BULL_PREFIX = 'avs-bull';
/** The reason a lost node's sessions are terminated with (GET /sessions/{id} `terminated_reason`). */
export const NODE_LOST = 'node_lost';

const NOW_MS = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

/**
 * Placement. ARGV: token, reservation ttl ms, only-this-node ('' = any), node ids to leave out (space
 * separated: nodes the caller just found unreachable, whose heartbeat has not expired yet). Among live nodes (their hash
 * exists, so their heartbeat is fresh) that are not draining and whose created-but-unstarted sessions
 * plus live reservations are below their pending cap, picks the one with the lowest
 * (active + pending + reserved) / maxActive and adds the token to its reservations. Returns the node id,
 * or false when no node has room.
 */
export const PLACE_LUA = `${NOW_MS}
local ids
if ARGV[3] ~= '' then ids = { ARGV[3] } else ids = redis.call('SMEMBERS', '${NODES_KEY}') end
local skip = {}
for id in string.gmatch(ARGV[4] or '', '%S+') do skip[id] = true end
local best, bestScore = nil, nil
for _, id in ipairs(ids) do
  local v = redis.call('HMGET', '${KEY_PREFIX}node:' .. id, 'maxActive', 'maxPending', 'active', 'pending', 'draining')
  if v[1] and not skip[id] then
    local resv = '${KEY_PREFIX}resv:' .. id
    redis.call('ZREMRANGEBYSCORE', resv, '-inf', now)
    local reserved = redis.call('ZCARD', resv)
    local maxA, maxP, a, p = tonumber(v[1]), tonumber(v[2]), tonumber(v[3]), tonumber(v[4])
    if v[5] ~= '1' and p + reserved < maxP then
      local score = (a + p + reserved) / maxA
      if best == nil or score < bestScore then best, bestScore = id, score end
    end
  end
end
if best == nil then return false end
local key = '${KEY_PREFIX}resv:' .. best
redis.call('ZADD', key, now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', key, ARGV[2])
return best`;

/**
 * Heartbeat and load. ARGV: node id, ttl ms, url, maxActive, maxPending, active, pending, draining (0/1),
 * routing slot, then reservation tokens now counted in \`pending\` (removed in the same step, so a slot is
 * never counted nowhere). The routing slot's key is renewed with the node's TTL when the node still
 * holds it (or it is free). Returns { existed, slotHeld }: existed is 1 when the node's hash still
 * existed (0: first registration, or the node was silent past its TTL and may have been declared lost);
 * slotHeld is 0 when another node took the slot meanwhile.
 */
export const HEARTBEAT_LUA = `${NOW_MS}
local key = '${KEY_PREFIX}node:' .. ARGV[1]
local existed = redis.call('EXISTS', key)
redis.call('HSET', key, 'url', ARGV[3], 'maxActive', ARGV[4], 'maxPending', ARGV[5], 'active', ARGV[6], 'pending', ARGV[7], 'draining', ARGV[8], 'slot', ARGV[9])
redis.call('PEXPIRE', key, ARGV[2])
redis.call('SADD', '${NODES_KEY}', ARGV[1])
redis.call('ZADD', '${BEATS_KEY}', now + tonumber(ARGV[2]), ARGV[1])
for i = 10, #ARGV do redis.call('ZREM', '${KEY_PREFIX}resv:' .. ARGV[1], ARGV[i]) end
local slotHeld = 1
local skey = '${KEY_PREFIX}slot:' .. ARGV[9]
local holder = redis.call('GET', skey)
if holder == false or holder == ARGV[1] then redis.call('SET', skey, ARGV[1], 'PX', ARGV[2]) else slotHeld = 0 end
return { existed, slotHeld }`;

/**
 * Routing slot claim. ARGV: node id, ttl ms, wanted slot ('' = the lowest free), slot count. A slot is
 * free when its key is missing (its node's TTL passed) or already this node's. Returns the slot, or -1
 * when the wanted one (or every one) is held by another live node.
 */
export const SLOT_CLAIM_LUA = `local function take(n)
  local key = '${KEY_PREFIX}slot:' .. n
  local holder = redis.call('GET', key)
  if holder == false or holder == ARGV[1] then
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    return true
  end
  return false
end
if ARGV[3] ~= '' then
  if take(tonumber(ARGV[3])) then return tonumber(ARGV[3]) end
  return -1
end
for n = 0, tonumber(ARGV[4]) - 1 do
  if take(n) then return n end
end
return -1`;

/** Gives a slot back (graceful leave) when it is still this node's. ARGV: slot, node id. */
export const SLOT_RELEASE_LUA = `local key = '${KEY_PREFIX}slot:' .. ARGV[1]
if redis.call('GET', key) == ARGV[2] then redis.call('DEL', key) end
return 1`;

/**
 * Node loss. ARGV: node id, tombstone retention ms (>= 1), now (ISO), expires_at (ISO). Only when the
 * node's hash has expired: every live session it owned becomes a tombstone (reason node_lost), its
 * index and reservations go, it leaves the node set and the session ids are published on the lost
 * channel. Returns the session ids. Idempotent: a second run finds the index gone.
 */
export const REAP_LUA = `local id = ARGV[1]
if redis.call('EXISTS', '${KEY_PREFIX}node:' .. id) == 1 then return {} end
local set = '${KEY_PREFIX}ns:' .. id
local sids = redis.call('SMEMBERS', set)
local lost = {}
for _, sid in ipairs(sids) do
  local key = '${KEY_PREFIX}s:' .. sid
  local raw = redis.call('GET', key)
  if raw then
    local rec = cjson.decode(raw)
    if rec.state ~= 'terminated' then
      local t = { session_id = rec.session_id, avatar_id = rec.avatar_id, model = rec.model,
        tts_provider = rec.tts_provider, tts_voice = rec.tts_voice, llm_system_prompt = cjson.null,
        lipsync_postprocess_mode = cjson.null, state = 'terminated', created_at = rec.created_at,
        updated_at = ARGV[3], expires_at = ARGV[4], terminated_reason = '${NODE_LOST}', node = id }
      redis.call('SET', key, cjson.encode(t), 'PX', ARGV[2])
      table.insert(lost, sid)
    end
  end
end
redis.call('DEL', set, '${KEY_PREFIX}resv:' .. id)
redis.call('SREM', '${NODES_KEY}', id)
redis.call('ZREM', '${BEATS_KEY}', id)
if #lost > 0 then redis.call('PUBLISH', '${LOST_CHANNEL}', cjson.encode({ node = id, sessions = lost })) end
return lost`;

/** Nodes whose heartbeat has expired (by Redis's clock, so node clocks need not agree). */
export const EXPIRED_LUA = `${NOW_MS}
return redis.call('ZRANGEBYSCORE', '${BEATS_KEY}', '-inf', now)`;

/**
 * Voice id allocation. ARGV: entry JSON without id (its display_label already de-duplicated). Increments
 * the counter and stores the entry under the new id in one step; returns the id.
 */
export const VOICE_CREATE_LUA = `local id = redis.call('INCR', '${VOICE_COUNTER_KEY}')
local entry = cjson.decode(ARGV[1])
entry.id = id
redis.call('HSET', '${VOICES_KEY}', tostring(id), cjson.encode(entry))
return id`;
