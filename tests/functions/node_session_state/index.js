// Session state (tests/sessions/test_session_state.py): each action uses context.session's API and says what it saw.
'use strict';

const show = (value) => (Buffer.isBuffer(value) ? { bytes: value.toString('base64') } : value);

exports.handler = async (event, context) => {
  const session = context.session;
  const action = event.action || 'get';
  if (!session) return { session: null };
  const key = event.key || 'k';
  switch (action) {
    case 'put':
      session.put(key, 'bytes' in event ? Buffer.from(event.bytes, 'base64') : event.value);
      // A request reads its own writes.
      return { read_back: show(session.get(key)) };
    case 'get': {
      const value = session.get(key, event.default);
      return { value: value === undefined ? null : show(value) };
    }
    case 'delete':
      session.delete(key);
      return { present: session.has(key) };
    case 'keys':
      return { keys: session.keys(), id: session.id };
    case 'incr': {
      const n = session.get('n', 0) + 1;
      session.put('n', n);
      return { n };
    }
    case 'incr_tx':
      // An async transaction: its writes apply once its promise resolves.
      return {
        n: await session.transact(async (tx) => {
          const n = tx.get('n', 0) + 1;
          await new Promise((resolve) => setImmediate(resolve));
          tx.put('n', n);
          return n;
        }),
      };
    case 'tx_then_fail':
      try {
        session.transact((tx) => {
          tx.put('n', -1000);
          tx.put('other', 'x');
          if (tx.get('n') !== -1000) throw new Error('a transaction must read its own writes');
          throw new Error('changed my mind');
        });
      } catch (e) {
        if (e.message !== 'changed my mind') throw e;
      }
      return { n: session.get('n', null), other: session.get('other', null) };
    case 'put_then_raise':
      session.put(key, event.value);
      throw new Error('after the put');
    case 'put_then_crash':
      session.put(key, event.value);
      process.exit(3);
      break;
    case 'big':
      session.put(key, Buffer.alloc(event.size, 120));
      return { stored: session.get(key).length };
    case 'bad_key':
      session.put(event.bad, 1);
      break;
    default:
  }
  return { error: 'unknown action' };
};
