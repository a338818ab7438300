exports.handler = async () => {
  return { this is not javascript
};
