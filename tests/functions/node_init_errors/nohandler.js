exports.somethingElse = async () => 'not the handler';
