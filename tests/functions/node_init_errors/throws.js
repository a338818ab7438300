class InitFailure extends Error {}
InitFailure.prototype.name = 'InitFailure';
throw new InitFailure('init went wrong in node');
